package machine

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/drain"
)

// machineStatus is the computed status plus when to look again for things
// no watch reports (boot timeout, heartbeat expiry).
type machineStatus struct {
	Status       macvirtv1alpha1.MacMachineStatus
	RequeueAfter time.Duration
}

// terminalReasons are Ready reasons of the Failed phase; a machine that
// reached one stays Failed (a pool replaces it, its claim goes Lost).
var terminalReasons = map[string]bool{
	macvirtv1alpha1.ReasonDataVolumeFailed: true,
	macvirtv1alpha1.ReasonBootTimeout:      true,
	macvirtv1alpha1.ReasonCrashLoop:        true,
	macvirtv1alpha1.ReasonHostLost:         true,
}

// computeMachineStatus derives phase and conditions from an observation.
func computeMachineStatus(o machineObservation) machineStatus {
	m := o.Machine
	st := m.Status.DeepCopy()
	st.ObservedGeneration = m.Generation
	st.VirtualMachineName = ""
	if o.VM != nil {
		st.VirtualMachineName = o.VM.Name
	}
	disks := observeDisks(o)
	vm := observeVM(o)
	guest := observeGuest(o, vm.runningSince)
	st.Provisioning = provisioningStatus(o, disks.progress)
	st.NodeName, st.Addresses, st.RunningSince = vm.node, vm.addresses, vm.runningSince

	draining := drainOf(o)
	phase, ready := summarize(o, disks.cond, vm, guest, draining)
	if o.WriteFailed != nil && phase != macvirtv1alpha1.MachineFailed && !o.Deleting {
		ready = base.Condition{Status: metav1.ConditionFalse, Problem: *o.WriteFailed}
	}
	st.Phase = phase
	// Transitions are stamped with the controller's clock, which the pool
	// compares against when it times how long a guest has been silent.
	set := func(t string, c base.Condition) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: c.Status,
			Reason: c.Reason, Message: c.Message, ObservedGeneration: m.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
	set(macvirtv1alpha1.ConditionDisksReady, disks.cond)
	set(macvirtv1alpha1.ConditionVMRunning, vm.cond)
	set(macvirtv1alpha1.ConditionGuestAgentReady, guest.cond)
	set(macvirtv1alpha1.ConditionReady, ready)
	set(macvirtv1alpha1.ConditionStalled, stalled(o, phase, ready))
	if !o.Deleting {
		// Deletion does not look at the class; what was known stays.
		set(macvirtv1alpha1.ConditionClassUpToDate, classUpToDate(o))
	}
	if o.Observed || o.Deleting {
		drain.SetHostDraining(&st.Conditions, draining, m.Generation, o.Now)
	}
	requeue := time.Duration(0)
	switch phase {
	case macvirtv1alpha1.MachineBooting, macvirtv1alpha1.MachineReady:
		requeue = guest.recheckAfter
	case macvirtv1alpha1.MachineStarting:
		requeue = vm.recheckAfter
	}
	if r := draining.RecheckAfter; r > 0 && (requeue == 0 || r < requeue) {
		requeue = r
	}
	if r := o.BlockedRecheck; o.Blocked != nil && r > 0 && (requeue == 0 || r < requeue) {
		requeue = r
	}
	return machineStatus{Status: *st, RequeueAfter: requeue}
}

// summarize picks the phase and the Ready condition, in order of precedence.
func summarize(o machineObservation, disks base.Condition, vm vmState, guest guestState, draining drain.State) (macvirtv1alpha1.MachinePhase, base.Condition) {
	m := o.Machine
	switch {
	case o.Deleting:
		return macvirtv1alpha1.MachineTerminating, base.CondFalse(macvirtv1alpha1.ReasonDeleting, "deleting: %s%s", o.DeletionStep, leftAlone(o.Foreign))
	case o.Class == nil:
		return macvirtv1alpha1.MachinePending, base.CondFalse(macvirtv1alpha1.ReasonClassNotFound, "%s", classNotFound(m))
	case o.Blocked != nil:
		return macvirtv1alpha1.MachinePending, base.CondFalse(o.Blocked.Reason, "%s", o.Blocked.Message)
	}
	if failed, ok := previousFailure(m); ok {
		return macvirtv1alpha1.MachineFailed, failed
	}
	if len(o.Foreign) > 0 {
		// Nothing was created, started or stopped: the machine waits for
		// a human (stalled says so).
		return macvirtv1alpha1.MachinePending, base.Condition{Status: metav1.ConditionFalse, Problem: notOwnedProblem(o.Foreign)}
	}
	if off, ok := forcedPowerOff(o); ok {
		return macvirtv1alpha1.MachineStopped, off
	}
	switch {
	case disks.Reason == macvirtv1alpha1.ReasonDataVolumeFailed:
		return macvirtv1alpha1.MachineFailed, disks
	case vm.cond.Reason == macvirtv1alpha1.ReasonCrashLoop:
		return macvirtv1alpha1.MachineFailed, vm.cond
	case disks.Reason == macvirtv1alpha1.ReasonPending:
		return macvirtv1alpha1.MachinePending, disks
	case disks.Reason == macvirtv1alpha1.ReasonWaitingForFirstConsumer && !wantsRunning(m):
		// Stopped, not Provisioning: nothing will fill the disks before
		// the machine starts (see dataVolumeProblem).
		return macvirtv1alpha1.MachineStopped, base.CondFalse(macvirtv1alpha1.ReasonStopped,
			"stopped (spec.running is false); its disks populate on first start: %s", disks.Message)
	case disks.Status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineProvisioning, disks
	case !wantsRunning(m):
		if o.VMI != nil {
			return macvirtv1alpha1.MachineStopping, base.CondFalse(macvirtv1alpha1.ReasonStopping, "graceful stop requested; waiting for macOS to shut down")
		}
		return macvirtv1alpha1.MachineStopped, base.CondFalse(macvirtv1alpha1.ReasonStopped, "stopped (spec.running is false); disks are kept")
	case draining.Stop && o.VMI != nil:
		return macvirtv1alpha1.MachineStopping, base.CondFalse(macvirtv1alpha1.ReasonDrainStop,
			"node %s is being drained: macOS is shutting down gracefully, to start again on another node", o.VMI.Status.EvacuationNodeName)
	case vm.cond.Status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineStarting, vm.cond
	case guest.cond.Reason == macvirtv1alpha1.ReasonBootTimeout:
		return macvirtv1alpha1.MachineFailed, guest.cond
	case guest.cond.Status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineBooting, guest.cond
	}
	if o.Class.Spec.Installer != nil {
		return macvirtv1alpha1.MachineReady, guest.cond
	}
	return macvirtv1alpha1.MachineReady, base.CondTrue("macOS is up and its guest agent answers")
}

// classUpToDate reports whether the machine's class is there at the
// machine's revision. It is informational: a machine running from the
// snapshot of its revision is Ready all the same.
func classUpToDate(o machineObservation) base.Condition {
	m := o.Machine
	switch {
	case o.Class == nil:
		return base.CondFalse(macvirtv1alpha1.ReasonClassNotFound, "%s", classNotFound(m))
	case o.ClassProblem != nil:
		return base.Condition{Status: metav1.ConditionFalse, Problem: *o.ClassProblem}
	}
	return base.CondTrue(fmt.Sprintf("MacClass %q is at revision %s, the machine's", m.Spec.ClassName, m.Spec.ClassRevision))
}

func classNotFound(m *macvirtv1alpha1.MacMachine) string {
	if m.Spec.ClassRevision == "" {
		return fmt.Sprintf("MacClass %q does not exist; create it or fix spec.className", m.Spec.ClassName)
	}
	return fmt.Sprintf("MacClass %q does not exist, and its revision %s, the machine's, was not kept", m.Spec.ClassName, m.Spec.ClassRevision)
}

// previousFailure returns the recorded terminal failure, if any: Failed is
// terminal, so what caused it stays the machine's state.
func previousFailure(m *macvirtv1alpha1.MacMachine) (base.Condition, bool) {
	if m.Status.Phase != macvirtv1alpha1.MachineFailed {
		return base.Condition{}, false
	}
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if c == nil || !terminalReasons[c.Reason] {
		return base.Condition{}, false
	}
	return base.Condition{Status: metav1.ConditionFalse, Problem: base.Problem{Reason: c.Reason, Message: c.Message}}, true
}

// stalled is True when progress needs a human: a failed stop request,
// objects under the machine's names that it does not control, a blocked
// class, a refused create, a disk CDI cannot start (quota, missing source),
// a terminal failure, or a forced power-off (the disk needs checking).
func stalled(o machineObservation, phase macvirtv1alpha1.MachinePhase, ready base.Condition) base.Condition {
	switch {
	case o.StopError != nil:
		return base.Condition{Status: metav1.ConditionTrue, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonStopFailed, Message: fmt.Sprintf(
			"graceful stop failed, so the VirtualMachine is left as it is and not deleted: %v", o.StopError)}}
	case len(o.Foreign) > 0 && !o.Deleting:
		return base.Condition{Status: metav1.ConditionTrue, Problem: notOwnedProblem(o.Foreign)}
	case o.Deleting && o.strayInstance && o.VM != nil:
		// Deletion cannot finish: the machine's VM waits for the instance.
		return base.Condition{Status: metav1.ConditionTrue, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned, Message: "deletion cannot go on: " + o.DeletionStep}}
	case o.Blocked != nil && !o.Deleting && o.Blocked.Reason != macvirtv1alpha1.ReasonDomainHookNotReady &&
		o.Blocked.Reason != macvirtv1alpha1.ReasonWaitingForImage:
		// A machine waiting for the domain hook is not stalled: the wait
		// ends by itself once the operator has written the hook's objects
		// (an operator that cannot says so in its log and metric).
		return base.Condition{Status: metav1.ConditionTrue, Problem: *o.Blocked}
	case o.WriteFailed != nil && !o.Deleting:
		return base.Condition{Status: metav1.ConditionTrue, Problem: *o.WriteFailed}
	case phase == macvirtv1alpha1.MachineFailed, launchStalledReasons[ready.Reason], stalledDiskReasons[ready.Reason],
		ready.Reason == macvirtv1alpha1.ReasonForcedPowerOff:
		return base.Condition{Status: metav1.ConditionTrue, Problem: ready.Problem}
	}
	return base.Condition{Status: metav1.ConditionFalse, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonAsExpected, Message: "making progress"}}
}

// drainOf is the drain decision for the observed machine.
func drainOf(o machineObservation) drain.State {
	return drain.Observe(drain.Input{Now: o.Now, Machine: o.Machine, Class: o.Class, VMI: o.VMI, Deleting: o.Deleting})
}
