package machine

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/slots"
)

// vmState is what the VirtualMachine and its instance say.
type vmState struct {
	cond         base.Condition
	node         string
	addresses    []string
	runningSince *metav1.Time
	// recheckAfter is when a start that has not happened times out.
	recheckAfter time.Duration
}

// observeVM maps the VM and VMI to the VMRunning condition.
func observeVM(o machineObservation) vmState {
	if c, ok := observeVMLaunch(o.VM); ok && (o.VMI == nil || o.VMI.Status.Phase != kubevirtv1.Running) {
		return vmState{cond: c}
	}
	if c, ok := guestShutDown(o); ok {
		return vmState{cond: c}
	}
	vmi := o.VMI
	if vmi == nil {
		if o.VM == nil {
			return vmState{cond: base.CondFalse(macvirtv1alpha1.ReasonPending, "VirtualMachine not created yet")}
		}
		return vmState{cond: base.CondFalse(macvirtv1alpha1.ReasonStarting, "no VirtualMachineInstance yet (VirtualMachine is %s)", printable(o.VM))}
	}
	st := vmState{node: vmi.Status.NodeName}
	for _, iface := range vmi.Status.Interfaces {
		if iface.IP != "" {
			st.addresses = append(st.addresses, iface.IP)
		}
	}
	if c, ok := observeInstanceTrouble(o.VM, vmi); ok {
		st.cond = c
		return st
	}
	if vmi.Status.Phase != kubevirtv1.Running {
		if msg, ok := unschedulable(vmi); ok {
			st.cond = base.CondFalse(macvirtv1alpha1.ReasonUnschedulable, "VirtualMachineInstance cannot be scheduled: %s", msg)
			if slots.Exhausted(msg) {
				st.cond = base.CondFalse(macvirtv1alpha1.ReasonMacOSSlotsExhausted,
					"no Apple node it may run on has a free macOS slot (%s; the licence allows %d macOS VMs per Mac, docs/licensing.md), so it waits for one; the scheduler says: %s",
					macvirtv1alpha1.ResourceMacOSSlots, macvirtv1alpha1.DefaultMacOSSlots, msg)
			}
			return st
		}
		st.cond, st.recheckAfter = observeStart(o, vmi)
		return st
	}
	st.runningSince = runningSince(vmi)
	st.cond = base.CondTrue(fmt.Sprintf("running on node %s", vmi.Status.NodeName))
	return st
}

// observeStart maps an instance that does not run yet, for no reason
// KubeVirt names, to Starting, and to StartTimeout once its pod has been
// placed and running (the instance Scheduled) for the class's bootTimeout
// without the domain starting: a start that never happens must not look
// like progress. Time spent before that (unschedulable, pulling images)
// does not count, and neither does the operator's own absence matter: the
// instance's timestamps are KubeVirt's. A Pending instance waits for its
// disks, which say so themselves.
func observeStart(o machineObservation, vmi *kubevirtv1.VirtualMachineInstance) (base.Condition, time.Duration) {
	starting := base.CondFalse(macvirtv1alpha1.ReasonStarting, "VirtualMachineInstance is %s", phaseOrPending(vmi.Status.Phase))
	since := scheduledSince(vmi)
	if since == nil || o.Class == nil || !vmi.DeletionTimestamp.IsZero() {
		return starting, 0
	}
	timeout := o.Class.Spec.Lifecycle.BootTimeoutOrDefault()
	if waited := o.Now.Sub(since.Time); waited < timeout {
		return starting, timeout - waited
	}
	return base.CondFalse(macvirtv1alpha1.ReasonStartTimeout,
		"VirtualMachineInstance %s has been Scheduled (its pod running) since %s, longer than bootTimeout %s, and its domain has not started: "+
			"look at its virt-launcher pod (kubectl -n %s get pods -l kubevirt.io/created-by=%s) and its events",
		vmi.Name, since.UTC().Format(time.RFC3339), timeout, vmi.Namespace, vmi.UID), 0
}

// scheduledSince is when the instance entered Scheduled (its pod placed and
// running); nil in any other phase.
func scheduledSince(vmi *kubevirtv1.VirtualMachineInstance) *metav1.Time {
	if vmi.Status.Phase != kubevirtv1.Scheduled {
		return nil
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Scheduled {
			ts := t.PhaseTransitionTimestamp
			return &ts
		}
	}
	return nil
}

func printable(vm *kubevirtv1.VirtualMachine) string {
	if vm.Status.PrintableStatus == "" {
		return "not reported yet"
	}
	return string(vm.Status.PrintableStatus)
}

func phaseOrPending(p kubevirtv1.VirtualMachineInstancePhase) string {
	if p == "" {
		return string(kubevirtv1.Pending)
	}
	return string(p)
}

// unschedulable returns the scheduler's message when the VMI's pod cannot
// be placed (for example, no labelled Apple-hardware node has room).
func unschedulable(vmi *kubevirtv1.VirtualMachineInstance) (string, bool) {
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceConditionType("PodScheduled") &&
			c.Status == "False" && c.Reason == "Unschedulable" {
			return c.Message, true
		}
	}
	return "", false
}

// runningSince is when KubeVirt recorded the VMI entering Running; the VMI's
// creation time when the transition was not recorded.
func runningSince(vmi *kubevirtv1.VirtualMachineInstance) *metav1.Time {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			ts := t.PhaseTransitionTimestamp
			return &ts
		}
	}
	ts := vmi.CreationTimestamp
	return &ts
}
