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
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// Stops, shutdowns and reboots the operator did not ask for, or that did
// not go as it asked.

// killedMessage is what virt-handler says, in a Warning event on the
// instance, when it ends Failed (pkg/virt-handler/controller.go, VMICrashed).
const killedMessage = "The VirtualMachineInstance crashed."

// forcedPowerOff is the Ready condition of a machine whose graceful stop
// ended with KubeVirt killing macOS: virt-handler destroys the domain once
// terminationGracePeriodSeconds is over, and reports a domain destroyed with
// ACPI on as phase Failed (pkg/virt-handler/vm.go, helperVmShutdown and
// calculateVmPhaseForStatusReason). It is seen on the instance, which goes
// soon after, and then kept while the machine stays stopped.
func forcedPowerOff(o machineObservation) (base.Condition, bool) {
	if wantsRunning(o.Machine) && !o.Deleting {
		// A running machine's failed instance is a crash, not a stop.
		return base.Condition{}, false
	}
	if vmi := killedByStop(o); vmi != nil {
		grace := "its grace period"
		if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = fmt.Sprintf("terminationGracePeriodSeconds (%ds)", *g)
		}
		return base.CondFalse(macvirtv1alpha1.ReasonForcedPowerOff,
			"macOS did not shut down within %s after the graceful stop, so KubeVirt killed it (VirtualMachineInstance %s is Failed: %q); "+
				"APFS on the system disk may be damaged: check it with First Aid before trusting its data, then set spec.running to true",
			grace, vmi.Name, killedMessage), true
	}
	if o.VMI != nil && o.VMI.Status.Phase == kubevirtv1.Running {
		return base.Condition{}, false
	}
	c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if c == nil || c.Reason != macvirtv1alpha1.ReasonForcedPowerOff {
		return base.Condition{}, false
	}
	return base.Condition{Status: metav1.ConditionFalse, Problem: base.Problem{Reason: c.Reason, Message: c.Message}}, true
}

// killedByStop is the machine's instance that ran, was being stopped, and
// ended Failed (virt-handler killed it at the end of the grace period), as
// the cache holds it or, once gone, as the watch saw it; nil when none.
func killedByStop(o machineObservation) *kubevirtv1.VirtualMachineInstance {
	for _, vmi := range []*kubevirtv1.VirtualMachineInstance{o.VMI, o.Killed} {
		if isKilledByStop(vmi) {
			return vmi
		}
	}
	return nil
}

func isKilledByStop(vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi == nil || vmi.DeletionTimestamp == nil || vmi.Status.Phase != kubevirtv1.Failed || !vmiEverRan(vmi) {
		return false
	}
	// An instance that failed before its deletion began crashed, and
	// KubeVirt is deleting it to start another (runStrategy Always): no
	// stop killed it. A kill ends a grace period after the deletion, so
	// its Failed transition is later (timestamps are whole seconds).
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Failed && !t.PhaseTransitionTimestamp.After(vmi.DeletionTimestamp.Time) {
			return false
		}
	}
	return true
}

func vmiEverRan(vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			return true
		}
	}
	return false
}

// guestShutDown is the VMRunning condition of a machine that should run
// whose macOS shut itself down: virt-handler reports the instance
// Succeeded, and virt-controller, under runStrategy Always, deletes it and
// creates a new one (pkg/virt-controller/watch/vm/vm.go, RunStrategyAlways).
// It holds from the Succeeded instance until the new one runs, so a claim
// sees one clear reason, not a flap through Starting and Pending.
func guestShutDown(o machineObservation) (base.Condition, bool) {
	if !wantsRunning(o.Machine) {
		return base.Condition{}, false
	}
	vmi := o.VMI
	if vmi != nil && vmi.Status.EvacuationNodeName != "" {
		// Shut down for a drain (HostDraining says so), not by macOS.
		return base.Condition{}, false
	}
	if vmi != nil && vmi.Status.Phase == kubevirtv1.Succeeded && vmiEverRan(vmi) {
		return base.CondFalse(macvirtv1alpha1.ReasonGuestShutDown,
			"macOS shut itself down (VirtualMachineInstance %s is Succeeded); KubeVirt starts it again, as runStrategy Always asks",
			vmi.Name), true
	}
	if vmi != nil && (vmi.Status.Phase == kubevirtv1.Running || vmi.IsFinal()) {
		return base.Condition{}, false
	}
	c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionVMRunning)
	if c == nil || c.Reason != macvirtv1alpha1.ReasonGuestShutDown {
		return base.Condition{}, false
	}
	return base.Condition{Status: metav1.ConditionFalse, Problem: base.Problem{Reason: c.Reason, Message: c.Message}}, true
}
