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

package machine

import (
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// stopNeeded decides whether the stop subresource still has something to
// do for the VM and its instance (nil when there is none), as read fresh.
//
// macvirt renders Always and Halted, but a user may switch the VM to Manual
// or RerunOnFailure. For those KubeVirt keeps the run strategy on a stop and
// records a stop request for the instance instead, which virt-controller
// carries out and then clears (pkg/virt-api/rest/lifecycle.go,
// StopVMRequestHandler; pkg/virt-controller/watch/vm/vm.go,
// syncRunStrategy). The VM then never looks halted, and once its instance is
// gone virt-api refuses another stop with "VM is not running": asking again
// would stall the machine (and its deletion) on a VM that is already
// stopped.
func stopNeeded(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if isHalted(vm) {
		return false
	}
	strategy, err := vm.RunStrategy()
	if err != nil {
		return true // virt-api reports the bad VM in its own words.
	}
	switch strategy {
	case kubevirtv1.RunStrategyManual, kubevirtv1.RunStrategyRerunOnFailure:
		if vmi == nil || vmi.IsFinal() {
			return false
		}
		reqs := vm.Status.StateChangeRequests
		pending := len(reqs) > 0 && reqs[0].Action == kubevirtv1.StopRequest &&
			reqs[0].UID != nil && *reqs[0].UID == vmi.UID
		return !pending
	}
	return true
}
