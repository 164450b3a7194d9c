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

package simulator

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// FaultKind names a failure the simulator can produce on demand.
type FaultKind string

const (
	// DataVolumeFailed makes a DataVolume's importer or clone pod fail. As
	// in CDI the pod is restarted and the DataVolume never enters Failed: it
	// stays ImportInProgress/CloneInProgress with Running=False (reason
	// Error, the importer's message) and status.restartCount grows, one
	// restart per kubelet back-off. Clearing the fault lets the next
	// restart succeed and the transfer resume (see faults_disks.go).
	DataVolumeFailed FaultKind = "DataVolumeFailed"
	// Unschedulable keeps a VirtualMachine's instance in phase Scheduling
	// with a PodScheduled=False condition (reason Unschedulable), as when no
	// node fits; the VirtualMachine reports ErrorUnschedulable. An instance
	// already scheduled is not affected. Clearing the fault lets scheduling
	// proceed.
	Unschedulable FaultKind = "Unschedulable"
	// CrashLoop makes a VirtualMachine's instance fail instead of reaching
	// Running (or fail if it already runs). virt-controller's start-failure
	// backoff follows: status.startFailure is recorded and the VirtualMachine
	// reports CrashLoopBackOff between attempts.
	CrashLoop FaultKind = "CrashLoop"
)

// Fault selects a failure and the object it applies to. Name is the
// DataVolume name for the DataVolume faults (DataVolumeFailed and those in
// faults_disks.go) and the VirtualMachine name for the other kinds. The
// object need not exist yet.
type Fault struct {
	Kind      FaultKind
	Namespace string
	Name      string
}

// Inject turns the fault on and prompts the affected controllers.
func (s *Simulator) Inject(f Fault) {
	s.mu.Lock()
	s.faults[f] = struct{}{}
	s.mu.Unlock()
	s.prompt(f)
}

// ClearAll turns every fault off, prompting the affected controllers, so a
// test's faults never leak into the next one.
func (s *Simulator) ClearAll() {
	s.mu.Lock()
	var all []Fault
	for f := range s.faults {
		all = append(all, f)
	}
	s.mu.Unlock()
	for _, f := range all {
		s.Clear(f)
	}
}

// Clear turns the fault off and prompts the affected controllers.
func (s *Simulator) Clear(f Fault) {
	s.mu.Lock()
	delete(s.faults, f)
	s.mu.Unlock()
	s.prompt(f)
}

func (s *Simulator) hasFault(kind FaultKind, namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.faults[Fault{Kind: kind, Namespace: namespace, Name: name}]
	return ok
}

// prompt asks the controllers concerned by f to reconcile its object, since
// a change to the in-memory fault set produces no watch event.
func (s *Simulator) prompt(f Fault) {
	meta := metav1.ObjectMeta{Namespace: f.Namespace, Name: f.Name}
	if dataVolumeFaultKinds[f.Kind] {
		send(s.dataVolumeEvents, &cdiv1.DataVolume{ObjectMeta: meta})
		return
	}
	send(s.vmiEvents, &kubevirtv1.VirtualMachineInstance{ObjectMeta: meta})
	send(s.podEvents, &kubevirtv1.VirtualMachineInstance{ObjectMeta: meta})
}

// send never blocks: with no controller reading (SetupWithManager not
// called) a full buffer drops the prompt rather than stall the caller.
func send(ch chan<- event.GenericEvent, obj client.Object) {
	select {
	case ch <- event.GenericEvent{Object: obj}:
	default:
	}
}
