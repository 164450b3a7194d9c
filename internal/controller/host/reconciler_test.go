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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// A heartbeat's lease runs from when the operator first saw it, whatever
// time the Mac stamped on it.
func TestTheLeaseRunsFromWhenTheOperatorSawTheHeartbeat(t *testing.T) {
	r := &Reconciler{}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	stamp := metav1.NewTime(t0.Add(-10 * time.Minute)) // a Mac ten minutes behind
	h := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-a"},
		Status: macvirtv1alpha1.MacHostStatus{Agent: &macvirtv1alpha1.HostAgentReport{LastHeartbeat: &stamp}}}
	if got := r.seenAt(h, t0); !got.Equal(t0) {
		t.Fatalf("first sight of a heartbeat: %s; want now, %s", got, t0)
	}
	if got := r.seenAt(h, t0.Add(30*time.Second)); !got.Equal(t0) {
		t.Fatalf("the same heartbeat again: %s; want when first seen, %s", got, t0)
	}
	next := metav1.NewTime(stamp.Add(15 * time.Second))
	h.Status.Agent.LastHeartbeat = &next
	if got := r.seenAt(h, t0.Add(45*time.Second)); !got.Equal(t0.Add(45 * time.Second)) {
		t.Fatalf("a new heartbeat: %s; want now, %s", got, t0.Add(45*time.Second))
	}
}
