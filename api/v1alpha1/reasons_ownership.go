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

package v1alpha1

// Condition reasons for objects a machine finds under its names but does not
// control.
const (
	// ReasonNotOwned means a VirtualMachine or DataVolume exists under a
	// name the machine's own would have, and its controller reference is
	// not the machine (someone's own VM, or one left by an earlier machine
	// of that name); or a VirtualMachineInstance of the VM's name that the
	// machine's VM does not control. macvirt never creates over, changes,
	// stops or deletes such an object: the machine stays Pending with
	// Stalled=True until a human deletes or renames the object, or gives
	// the machine another name. A machine being deleted leaves the object
	// as it is and deletes only its own.
	ReasonNotOwned = "NotOwned"
)
