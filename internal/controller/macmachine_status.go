package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// machineObservation is everything a reconcile read about one machine. The
// status is computed from it alone, so a restarted operator that observes
// the same objects computes the same phase.
type machineObservation struct {
	Now time.Time
	// Killed is an instance of the machine that the watch saw KubeVirt
	// kill at the end of a graceful stop, and that the cache no longer
	// holds (it goes soon after): a slow or busy operator still reports it.
	Killed *kubevirtv1.VirtualMachineInstance
	// ListeningSince is when the operator's agent endpoint began to listen
	// (at the latest, when this operator started): no guest is judged
	// silent for a time when nobody could have heard it.
	ListeningSince time.Time
	Machine        *macvirtv1alpha1.MacMachine
	// Class is what the machine renders and observes from: its live class,
	// or the snapshot of its recorded revision. Nil when neither exists.
	Class *macvirtv1alpha1.MacClass
	// ClassProblem says why Class is not the live class at the machine's
	// revision (deleted, or changed since); nil when it is.
	ClassProblem *problem
	// Blocked, when set, is a problem that needs a human before the machine
	// can be rendered (an unreadable Secret, an unrenderable class).
	Blocked *problem
	// BlockedRecheck, when set, is when a Blocked problem that can end by
	// itself is looked at again (nothing watched announces its end).
	BlockedRecheck time.Duration
	// hookAnnotationsStale, when set, says why the VM's template does not
	// carry the domain settings of the operator's transport; the VM is not
	// started meanwhile.
	hookAnnotationsStale error
	// DataVolumes holds the rendered DataVolumes' live objects, bootloader
	// first; an entry is nil while that DataVolume does not exist.
	DataVolumes []*cdiv1.DataVolume
	// DiskSources holds, by DataVolume name, the DataSource of each
	// DataVolume CDI has not reported on yet.
	DiskSources map[string]*diskSource
	VM          *kubevirtv1.VirtualMachine
	VMI         *kubevirtv1.VirtualMachineInstance
	// Observed is true once the VM and VMI were read in this reconcile;
	// what only they can tell (a drain) is kept as it was otherwise.
	Observed bool
	// Foreign names, with its controller, each object under the machine's
	// names that the machine does not control (a VM or DataVolume whose
	// controller reference is not the machine, a VMI whose controller
	// reference is not the machine's VM). They were set aside when read
	// (DataVolumes, VM and VMI hold only the machine's own) and are never
	// written: the machine is Pending and Stalled (ReasonNotOwned) while
	// they exist, and a deleting machine leaves them as they are.
	Foreign []string
	// strayInstance is true when the VMI set aside carries the name of a VM
	// the machine controls: that VM is neither stopped nor deleted while it
	// exists, since KubeVirt could act on the instance by its name.
	strayInstance bool
	// StopError is the failure of a stop request made in this reconcile.
	StopError error
	// WriteFailed is a create the API server refused in this reconcile,
	// in its words.
	WriteFailed *problem
	// Deleting is true once the machine has a deletion timestamp;
	// DeletionStep says what deletion waits for.
	Deleting     bool
	DeletionStep string

	// rendered memoizes this reconcile's rendering.
	rendered *renderedObjects
}

// renderedObjects is what render produced for the machine.
type renderedObjects struct {
	vm          *kubevirtv1.VirtualMachine
	dataVolumes []cdiv1.DataVolume
}

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
	st.Provisioning = nil
	if disks.progress != "" {
		st.Provisioning = &macvirtv1alpha1.ProvisioningStatus{Progress: disks.progress}
	}
	st.NodeName, st.Addresses, st.RunningSince = vm.node, vm.addresses, vm.runningSince

	drain := observeDrain(o)
	phase, ready := summarize(o, disks.cond, vm, guest, drain)
	if o.WriteFailed != nil && phase != macvirtv1alpha1.MachineFailed && !o.Deleting {
		ready = condition{metav1.ConditionFalse, *o.WriteFailed}
	}
	st.Phase = phase
	// Transitions are stamped with the controller's clock, which the pool
	// compares against when it times how long a guest has been silent.
	set := func(t string, c condition) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: c.status,
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
		setHostDraining(&st.Conditions, drain, m.Generation, o.Now)
	}
	requeue := time.Duration(0)
	switch phase {
	case macvirtv1alpha1.MachineBooting, macvirtv1alpha1.MachineReady:
		requeue = guest.recheckAfter
	case macvirtv1alpha1.MachineStarting:
		requeue = vm.recheckAfter
	}
	if r := drain.RecheckAfter; r > 0 && (requeue == 0 || r < requeue) {
		requeue = r
	}
	if r := o.BlockedRecheck; o.Blocked != nil && r > 0 && (requeue == 0 || r < requeue) {
		requeue = r
	}
	return machineStatus{Status: *st, RequeueAfter: requeue}
}

// summarize picks the phase and the Ready condition, in order of precedence.
func summarize(o machineObservation, disks condition, vm vmState, guest guestState, drain drainState) (macvirtv1alpha1.MachinePhase, condition) {
	m := o.Machine
	switch {
	case o.Deleting:
		return macvirtv1alpha1.MachineTerminating, condFalse(macvirtv1alpha1.ReasonDeleting, "deleting: %s%s", o.DeletionStep, leftAlone(o.Foreign))
	case o.Class == nil:
		return macvirtv1alpha1.MachinePending, condFalse(macvirtv1alpha1.ReasonClassNotFound, "%s", classNotFound(m))
	case o.Blocked != nil:
		return macvirtv1alpha1.MachinePending, condFalse(o.Blocked.Reason, "%s", o.Blocked.Message)
	}
	if failed, ok := previousFailure(m); ok {
		return macvirtv1alpha1.MachineFailed, failed
	}
	if len(o.Foreign) > 0 {
		// Nothing was created, started or stopped: the machine waits for
		// a human (stalled says so).
		return macvirtv1alpha1.MachinePending, condition{metav1.ConditionFalse, notOwnedProblem(o.Foreign)}
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
		return macvirtv1alpha1.MachineStopped, condFalse(macvirtv1alpha1.ReasonStopped,
			"stopped (spec.running is false); its disks populate on first start: %s", disks.Message)
	case disks.status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineProvisioning, disks
	case !wantsRunning(m):
		if o.VMI != nil {
			return macvirtv1alpha1.MachineStopping, condFalse(macvirtv1alpha1.ReasonStopping, "graceful stop requested; waiting for macOS to shut down")
		}
		return macvirtv1alpha1.MachineStopped, condFalse(macvirtv1alpha1.ReasonStopped, "stopped (spec.running is false); disks are kept")
	case drain.Stop && o.VMI != nil:
		return macvirtv1alpha1.MachineStopping, condFalse(macvirtv1alpha1.ReasonDrainStop,
			"node %s is being drained: macOS is shutting down gracefully, to start again on another node", o.VMI.Status.EvacuationNodeName)
	case vm.cond.status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineStarting, vm.cond
	case guest.cond.Reason == macvirtv1alpha1.ReasonBootTimeout:
		return macvirtv1alpha1.MachineFailed, guest.cond
	case guest.cond.status != metav1.ConditionTrue:
		return macvirtv1alpha1.MachineBooting, guest.cond
	}
	return macvirtv1alpha1.MachineReady, condTrue("macOS is up and its guest agent answers")
}

// classUpToDate reports whether the machine's class is there at the
// machine's revision. It is informational: a machine running from the
// snapshot of its revision is Ready all the same.
func classUpToDate(o machineObservation) condition {
	m := o.Machine
	switch {
	case o.Class == nil:
		return condFalse(macvirtv1alpha1.ReasonClassNotFound, "%s", classNotFound(m))
	case o.ClassProblem != nil:
		return condition{metav1.ConditionFalse, *o.ClassProblem}
	}
	return condTrue(fmt.Sprintf("MacClass %q is at revision %s, the machine's", m.Spec.ClassName, m.Spec.ClassRevision))
}

func classNotFound(m *macvirtv1alpha1.MacMachine) string {
	if m.Spec.ClassRevision == "" {
		return fmt.Sprintf("MacClass %q does not exist; create it or fix spec.className", m.Spec.ClassName)
	}
	return fmt.Sprintf("MacClass %q does not exist, and its revision %s, the machine's, was not kept", m.Spec.ClassName, m.Spec.ClassRevision)
}

// previousFailure returns the recorded terminal failure, if any: Failed is
// terminal, so what caused it stays the machine's state.
func previousFailure(m *macvirtv1alpha1.MacMachine) (condition, bool) {
	if m.Status.Phase != macvirtv1alpha1.MachineFailed {
		return condition{}, false
	}
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if c == nil || !terminalReasons[c.Reason] {
		return condition{}, false
	}
	return condition{metav1.ConditionFalse, problem{c.Reason, c.Message}}, true
}

// stalled is True when progress needs a human: a failed stop request,
// objects under the machine's names that it does not control, a blocked
// class, a refused create, a disk CDI cannot start (quota, missing source),
// a terminal failure, or a forced power-off (the disk needs checking).
func stalled(o machineObservation, phase macvirtv1alpha1.MachinePhase, ready condition) condition {
	switch {
	case o.StopError != nil:
		return condition{metav1.ConditionTrue, problem{macvirtv1alpha1.ReasonStopFailed, fmt.Sprintf(
			"graceful stop failed, so the VirtualMachine is left as it is and not deleted: %v", o.StopError)}}
	case len(o.Foreign) > 0 && !o.Deleting:
		return condition{metav1.ConditionTrue, notOwnedProblem(o.Foreign)}
	case o.Deleting && o.strayInstance && o.VM != nil:
		// Deletion cannot finish: the machine's VM waits for the instance.
		return condition{metav1.ConditionTrue, problem{macvirtv1alpha1.ReasonNotOwned, "deletion cannot go on: " + o.DeletionStep}}
	case o.Blocked != nil && !o.Deleting && o.Blocked.Reason != macvirtv1alpha1.ReasonDomainHookNotReady:
		// A machine waiting for the domain hook is not stalled: the wait
		// ends by itself once the operator has written the hook's objects
		// (an operator that cannot says so in its log and metric).
		return condition{metav1.ConditionTrue, *o.Blocked}
	case o.WriteFailed != nil && !o.Deleting:
		return condition{metav1.ConditionTrue, *o.WriteFailed}
	case phase == macvirtv1alpha1.MachineFailed, launchStalledReasons[ready.Reason], stalledDiskReasons[ready.Reason],
		ready.Reason == macvirtv1alpha1.ReasonForcedPowerOff:
		return condition{metav1.ConditionTrue, ready.problem}
	}
	return condition{metav1.ConditionFalse, problem{macvirtv1alpha1.ReasonAsExpected, "making progress"}}
}

func wantsRunning(m *macvirtv1alpha1.MacMachine) bool {
	return m.Spec.Running == nil || *m.Spec.Running
}
