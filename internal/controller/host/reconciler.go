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
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// Reconciler keeps the operator's part of each MacHost's status.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// ControllerName overrides the controller's name, so tests can run
	// several managers in one process.
	ControllerName string

	// beats holds, per host, the last heartbeat of its agent this operator
	// saw, recorded when it first saw it: a lease runs from then, whatever
	// time the Mac stamped on it.
	beats base.Assumed[string, time.Time]
}

// seenAt is when the operator first saw the host's current heartbeat: now
// for a heartbeat it has not seen before (after its own start too).
func (r *Reconciler) seenAt(h *macvirtv1alpha1.MacHost, now time.Time) time.Time {
	a := h.Status.Agent
	if a == nil || a.LastHeartbeat == nil {
		r.beats.Forget(h.Name)
		return now
	}
	if beat, at, ok := r.beats.Get(h.Name, now); ok && beat.Equal(a.LastHeartbeat.Time) {
		return at
	}
	r.beats.Assume(h.Name, a.LastHeartbeat.Time, now, base.UntilForgotten)
	return now
}
