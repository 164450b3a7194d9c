/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package host

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/state"
)

// scope is everything a reconcile read about one host.
type scope struct {
	Now  time.Time
	Host *macvirtv1alpha1.MacHost
	// Placed is how many machines are placed on the host; Suspended how
	// many of them hold no slot (idle, their VM suspended).
	Placed, Suspended int
	// BeatSeenAt is when this operator first saw the agent's current
	// heartbeat, by its own clock: the lease runs from then, so a Mac
	// whose clock is off is judged by the operator's time, and no Mac is
	// judged for a time the operator was not watching.
	BeatSeenAt time.Time
	// Observed is true once the machines were counted; the status is
	// written only then.
	Observed bool
}

// countMachines answers: how many machines are placed on the host?
func (r *Reconciler) countMachines(ctx context.Context, s *scope) (bool, error) {
	list := &macvirtv1alpha1.MacMachineList{}
	if err := r.List(ctx, list, client.MatchingFields{index.MachineHost: s.Host.Name}); err != nil {
		return false, fmt.Errorf("listing the machines on MacHost %s: %w", s.Host.Name, err)
	}
	s.Placed, s.Suspended, s.Observed = len(list.Items), 0, true
	for i := range list.Items {
		if !state.HoldsSlot(&list.Items[i]) {
			s.Suspended++
		}
	}
	return true, nil
}
