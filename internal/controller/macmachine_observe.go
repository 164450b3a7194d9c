package controller

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// diskState is what the DataVolumes say.
type diskState struct {
	cond     condition
	progress string
}

// observeDisks maps the DataVolumes to the DisksReady condition and the
// progress of the slowest one.
func observeDisks(o machineObservation) diskState {
	if len(o.DataVolumes) == 0 {
		return diskState{cond: condFalse(macvirtv1alpha1.ReasonPending, "disks not requested yet")}
	}
	if slices.Contains(o.DataVolumes, nil) {
		return diskState{cond: condFalse(macvirtv1alpha1.ReasonPending, "disks not requested yet")}
	}
	// What CDI reports as wrong (macmachine_disks.go) wins over progress.
	if c, ok := worstDiskProblem(o); ok {
		return diskState{cond: c}
	}
	var waiting []string
	var unfinished []diskProgress
	for _, dv := range o.DataVolumes {
		if dv.Status.Phase == cdiv1.Succeeded {
			continue
		}
		phase := string(dv.Status.Phase)
		if phase == "" {
			phase = "Pending"
		}
		// Phases only: CDI's own progress changes every 2 s (see reportedProgress).
		waiting = append(waiting, fmt.Sprintf("%s %s", dv.Name, phase))
		unfinished = append(unfinished, diskProgress{dv.Status.Phase, dv.Status.Progress})
	}
	if len(waiting) == 0 {
		return diskState{cond: condTrue("system and bootloader disks are ready")}
	}
	previous := ""
	if p := o.Machine.Status.Provisioning; p != nil {
		previous = p.Progress
	}
	progress := reportedProgress(unfinished, previous)
	if progress == "" {
		// Every disk is cloned by a method that reports no progress.
		return diskState{cond: condFalse(macvirtv1alpha1.ReasonProvisioning,
			"cloning (CDI reports no progress for this clone method until it is done): %s", strings.Join(waiting, ", "))}
	}
	return diskState{
		cond:     condFalse(macvirtv1alpha1.ReasonProvisioning, "importing (%s): %s", progress, strings.Join(waiting, ", ")),
		progress: progress,
	}
}

// dataVolumeMessage is the most useful message CDI left on a DataVolume.
func dataVolumeMessage(dv *cdiv1.DataVolume) string {
	for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady, cdiv1.DataVolumeBound} {
		for _, c := range dv.Status.Conditions {
			if c.Type == t && c.Message != "" {
				return c.Message
			}
		}
	}
	return "no message from CDI"
}

// parsePercent reads CDI's progress strings such as "45.20%".
func parsePercent(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	return v, err == nil && strings.HasSuffix(s, "%")
}

// vmState is what the VirtualMachine and its instance say.
type vmState struct {
	cond         condition
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
			return vmState{cond: condFalse(macvirtv1alpha1.ReasonPending, "VirtualMachine not created yet")}
		}
		return vmState{cond: condFalse(macvirtv1alpha1.ReasonStarting, "no VirtualMachineInstance yet (VirtualMachine is %s)", printable(o.VM))}
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
			st.cond = condFalse(macvirtv1alpha1.ReasonUnschedulable, "VirtualMachineInstance cannot be scheduled: %s", msg)
			if slotsExhausted(msg) {
				st.cond = condFalse(macvirtv1alpha1.ReasonMacOSSlotsExhausted,
					"no Apple node it may run on has a free macOS slot (%s; the licence allows %d macOS VMs per Mac, docs/licensing.md), so it waits for one; the scheduler says: %s",
					macvirtv1alpha1.ResourceMacOSSlots, macvirtv1alpha1.DefaultMacOSSlots, msg)
			}
			return st
		}
		st.cond, st.recheckAfter = observeStart(o, vmi)
		return st
	}
	st.runningSince = runningSince(vmi)
	st.cond = condTrue(fmt.Sprintf("running on node %s", vmi.Status.NodeName))
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
func observeStart(o machineObservation, vmi *kubevirtv1.VirtualMachineInstance) (condition, time.Duration) {
	starting := condFalse(macvirtv1alpha1.ReasonStarting, "VirtualMachineInstance is %s", phaseOrPending(vmi.Status.Phase))
	since := scheduledSince(vmi)
	if since == nil || o.Class == nil || !vmi.DeletionTimestamp.IsZero() {
		return starting, 0
	}
	timeout := o.Class.Spec.Lifecycle.BootTimeoutOrDefault()
	if waited := o.Now.Sub(since.Time); waited < timeout {
		return starting, timeout - waited
	}
	return condFalse(macvirtv1alpha1.ReasonStartTimeout,
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

func startFailure(vm *kubevirtv1.VirtualMachine) string {
	if f := vm.Status.StartFailure; f != nil {
		return fmt.Sprintf("%d consecutive failed starts", f.ConsecutiveFailCount)
	}
	return "KubeVirt reports CrashLoopBackOff"
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

// guestState is what the guest agent's heartbeats say.
type guestState struct {
	cond         condition
	recheckAfter time.Duration
}

// observeGuest maps the last heartbeat to GuestAgentReady. A heartbeat from
// before the current boot does not count. Boot and heartbeat timeouts run
// from the later of the event and the moment the agent endpoint began to
// listen: a guest is never condemned for the operator's own absence (a
// rescheduled, crashed or upgraded operator pod).
func observeGuest(o machineObservation, since *metav1.Time) guestState {
	if since == nil || o.Class == nil {
		return guestState{cond: condFalse(macvirtv1alpha1.ReasonPending, "VM not running")}
	}
	lc := o.Class.Spec.Lifecycle
	var last *metav1.Time
	if g := o.Machine.Status.Guest; g != nil {
		last = g.LastHeartbeat
	}
	if last == nil || last.Before(since) {
		from, note := since.Time, ""
		if o.ListeningSince.After(from) {
			from, note = o.ListeningSince, fmt.Sprintf(" (counted from %s, when the agent endpoint began to listen)",
				o.ListeningSince.UTC().Format(time.RFC3339))
		}
		waited := o.Now.Sub(from)
		if waited >= lc.BootTimeoutOrDefault() {
			return guestState{cond: condFalse(macvirtv1alpha1.ReasonBootTimeout,
				"no guest-agent heartbeat %s after the VM started%s (bootTimeout %s): macOS may be stuck at the OpenCore picker or a kernel panic",
				waited.Round(time.Second), note, lc.BootTimeoutOrDefault())}
		}
		return guestState{
			cond: condFalse(macvirtv1alpha1.ReasonBooting, "VM running; waiting for the first guest-agent heartbeat (bootTimeout %s)",
				lc.BootTimeoutOrDefault()),
			recheckAfter: lc.BootTimeoutOrDefault() - waited,
		}
	}
	// Messages name fixed times, not ages, so an unchanged machine keeps an
	// unchanged status and a reconcile writes nothing.
	timeout := lc.HeartbeatTimeoutOrDefault()
	if last.Time.Before(o.ListeningSince) {
		// A guest already judged silent stays so until it is heard: a
		// restart must not turn a hung Mac back into a bindable one.
		if c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady); c != nil &&
			c.Status == metav1.ConditionFalse && c.Reason == macvirtv1alpha1.ReasonHeartbeatStale {
			return guestState{cond: condition{metav1.ConditionFalse, problem{c.Reason, c.Message}}}
		}
		// The guest may have been heartbeating into a closed endpoint; it
		// gets a full heartbeatTimeout from when the endpoint opened.
		waited := o.Now.Sub(o.ListeningSince)
		if waited >= timeout {
			return guestState{cond: condFalse(macvirtv1alpha1.ReasonHeartbeatStale,
				"guest agent silent since %s, and for heartbeatTimeout %s after the agent endpoint began to listen at %s",
				last.UTC().Format(time.RFC3339), timeout, o.ListeningSince.UTC().Format(time.RFC3339))}
		}
		return guestState{
			cond: condTrue(fmt.Sprintf("last heartbeat at %s, before the agent endpoint began to listen at %s; the guest has heartbeatTimeout %s from then to report",
				last.UTC().Format(time.RFC3339), o.ListeningSince.UTC().Format(time.RFC3339), timeout)),
			recheckAfter: timeout - waited,
		}
	}
	age := o.Now.Sub(last.Time)
	if age >= timeout {
		return guestState{cond: condFalse(macvirtv1alpha1.ReasonHeartbeatStale,
			"guest agent silent since %s, longer than heartbeatTimeout %s", last.UTC().Format(time.RFC3339), timeout)}
	}
	return guestState{
		cond:         condTrue(fmt.Sprintf("guest agent heartbeats within heartbeatTimeout %s", timeout)),
		recheckAfter: timeout - age,
	}
}
