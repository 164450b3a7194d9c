package machine

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// onHost reports a machine of the Virtualization runtime: placed on a
// MacHost, or of a class that runs there.
func onHost(o machineObservation) bool {
	return o.Machine.Spec.HostName != "" || (o.Class != nil && o.Class.Spec.OnHosts())
}

// hostLost says why the machine's host is lost (gone, or its lease
// expired, as the host controller judged), or "" while it is not.
func hostLost(o machineObservation) string {
	m := o.Machine
	if !o.HostObserved || m.Spec.HostName == "" {
		return ""
	}
	if o.Host == nil {
		return fmt.Sprintf("MacHost %s no longer exists", m.Spec.HostName)
	}
	if c := meta.FindStatusCondition(o.Host.Status.Conditions, macvirtv1alpha1.ConditionReady); c != nil && c.Reason == macvirtv1alpha1.ReasonHostLost {
		return fmt.Sprintf("MacHost %s is lost (%s)", m.Spec.HostName, c.Message)
	}
	return ""
}

// hostedState is a Virtualization machine's conditions, from its host
// agent's report and its guest agent's heartbeats.
type hostedState struct {
	phase                   macvirtv1alpha1.MachinePhase
	disks, vm, guest, ready base.Condition
	recheckAfter            time.Duration
}

// observeHosted derives the phase and conditions of a Virtualization
// machine, in order of precedence, like summarize does for KubeVirt.
func observeHosted(o machineObservation) hostedState {
	m := o.Machine
	pending := base.CondFalse(macvirtv1alpha1.ReasonPending, "the host agent has not made the VM yet")
	s := hostedState{disks: pending, vm: pending, guest: base.CondFalse(macvirtv1alpha1.ReasonPending, "VM not running")}
	final := func(phase macvirtv1alpha1.MachinePhase, ready base.Condition) hostedState {
		s.phase, s.ready = phase, ready
		return s
	}
	switch {
	case o.Deleting:
		return final(macvirtv1alpha1.MachineTerminating, base.CondFalse(macvirtv1alpha1.ReasonDeleting, "deleting: %s", o.DeletionStep))
	case o.Class == nil:
		return final(macvirtv1alpha1.MachinePending, base.CondFalse(macvirtv1alpha1.ReasonClassNotFound, "%s", classNotFound(m)))
	case o.Blocked != nil:
		return final(macvirtv1alpha1.MachinePending, base.Condition{Status: metav1.ConditionFalse, Problem: *o.Blocked})
	}
	if failed, ok := previousFailure(m); ok {
		return final(macvirtv1alpha1.MachineFailed, failed)
	}
	if m.Spec.HostName == "" {
		p := base.Problem{Reason: macvirtv1alpha1.ReasonNoHostAvailable, Message: "looking for a MacHost"}
		if o.Unplaced != nil {
			p = *o.Unplaced
		}
		return final(macvirtv1alpha1.MachinePending, base.Condition{Status: metav1.ConditionFalse, Problem: p})
	}
	if lost := hostLost(o); lost != "" {
		return final(macvirtv1alpha1.MachineFailed, base.CondFalse(macvirtv1alpha1.ReasonHostLost,
			"%s: the machine's VM and disk are on that Mac, so it is never moved; a pool replaces it, and a claim on it is Lost", lost))
	}
	hv := m.Status.Host
	if hv == nil || hv.State == macvirtv1alpha1.HostVMCreating || hv.State == macvirtv1alpha1.HostVMDeleted {
		msg := fmt.Sprintf("placed on MacHost %s; its host agent is making the VM", m.Spec.HostName)
		if hv != nil && hv.Pull != nil {
			msg = fmt.Sprintf("placed on MacHost %s; its host agent %s", m.Spec.HostName, pullMessage(hv.Pull))
		}
		reason := macvirtv1alpha1.ReasonProvisioning
		if hv != nil && hv.Error != "" {
			msg, reason = fmt.Sprintf("placed on MacHost %s; its host agent could not make the VM: %s", m.Spec.HostName, hv.Error),
				macvirtv1alpha1.ReasonHostVMFailed
		}
		s.disks = base.CondFalse(reason, "%s", msg)
		return final(macvirtv1alpha1.MachineProvisioning, s.disks)
	}
	s.disks = base.CondTrue(fmt.Sprintf("the VM %s and its disk are on MacHost %s", hv.VMName, m.Spec.HostName))
	running := hv.State == macvirtv1alpha1.HostVMRunning || hv.State == macvirtv1alpha1.HostVMStopping
	suspended := hv.State == macvirtv1alpha1.HostVMSuspended || hv.State == macvirtv1alpha1.HostVMSuspending
	if hv.State == macvirtv1alpha1.HostVMSuspending && m.Spec.ClaimRef == nil && wantsRunning(m) {
		// Not bindable while its memory is saved: a binding then could
		// hand the guest a tenant's keys and tasks before it is paused.
		s.vm = base.CondFalse(macvirtv1alpha1.ReasonSuspending, "its host agent on MacHost %s is saving the idle VM's memory", m.Spec.HostName)
		return final(macvirtv1alpha1.MachineSuspended, s.vm)
	}
	if suspended && m.Spec.ClaimRef == nil && wantsRunning(m) {
		// Idle and Ready to bind: the binding resumes it. Its guest is not
		// heard while it sleeps, and is not held to heartbeatTimeout.
		since := "now"
		if hv.SuspendedAt != nil {
			since = "at " + hv.SuspendedAt.UTC().Format(time.RFC3339)
		}
		msg := fmt.Sprintf("suspended on MacHost %s %s (its memory saved beside its disk): it holds no licence slot; a claim's binding resumes it", m.Spec.HostName, since)
		s.vm = base.CondFalse(macvirtv1alpha1.ReasonSuspended, "%s", msg)
		s.guest = base.Condition{Status: metav1.ConditionTrue, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonSuspended,
			Message: "the guest agent reported before the VM was suspended; it reports again, with a new token and host keys, once resumed"}}
		return final(macvirtv1alpha1.MachineSuspended, base.Condition{Status: metav1.ConditionTrue, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonSuspended, Message: msg}})
	}
	if !wantsRunning(m) {
		s.vm = base.CondFalse(macvirtv1alpha1.ReasonStopped, "stopped (spec.running is false); its disk is kept on MacHost %s", m.Spec.HostName)
		if running {
			s.vm = base.CondFalse(macvirtv1alpha1.ReasonStopping, "macOS was asked to shut down; waiting for it on MacHost %s", m.Spec.HostName)
			if hv.Error != "" {
				// Past the grace period, or a tool that cannot ask: never
				// forced, and a human is needed.
				s.vm = base.CondFalse(macvirtv1alpha1.ReasonStopFailed, "the host agent on MacHost %s: %s", m.Spec.HostName, hv.Error)
			}
			return final(macvirtv1alpha1.MachineStopping, s.vm)
		}
		return final(macvirtv1alpha1.MachineStopped, s.vm)
	}
	if hv.State != macvirtv1alpha1.HostVMRunning {
		s.vm = base.CondFalse(macvirtv1alpha1.ReasonStarting, "the host agent on MacHost %s is starting the VM", m.Spec.HostName)
		if suspended || (hv.State == macvirtv1alpha1.HostVMStarting && hv.Resumes > 0) {
			s.vm = base.CondFalse(macvirtv1alpha1.ReasonResuming, "the host agent on MacHost %s is resuming the suspended VM for its claim", m.Spec.HostName)
		}
		if hv.Error != "" {
			s.vm = base.CondFalse(macvirtv1alpha1.ReasonHostVMFailed, "the host agent on MacHost %s could not start the VM: %s", m.Spec.HostName, hv.Error)
		}
		return final(macvirtv1alpha1.MachineStarting, s.vm)
	}
	s.vm = base.CondTrue(fmt.Sprintf("the VM runs on MacHost %s", m.Spec.HostName))
	since, og := hv.RunningSince, o
	if hv.Resumes > 0 {
		// A resumed guest runs on from where it was. It counts as heard
		// once the operator heard it since the last resume (the count, not
		// the Mac's clock against the operator's), and may be heard before
		// the agent saw its VM run; a heartbeat from before does not count.
		g := o.Machine.Status.Guest
		if g != nil && g.Resumes >= hv.Resumes && g.LastHeartbeat != nil {
			if since == nil || g.LastHeartbeat.Before(since) {
				since = g.LastHeartbeat
			}
		} else if g != nil {
			m2, g2 := *o.Machine, *g
			g2.LastHeartbeat = nil
			m2.Status.Guest = &g2
			og.Machine = &m2
		}
	}
	guest := observeGuest(og, since)
	if guest.cond.Reason == macvirtv1alpha1.ReasonBootTimeout {
		guest.cond.Message = fmt.Sprintf("no guest-agent heartbeat within bootTimeout %s of the VM's start on MacHost %s: "+
			"macOS did not boot, its guest agent is not installed, or it found no configuration at /Volumes/My Shared Files/macvirt "+
			"(the host agent's log says whether it fetched and shared it; docs/guest-agent.md)",
			o.Class.Spec.Lifecycle.BootTimeoutOrDefault(), m.Spec.HostName)
	}
	if hv.Resumes > 0 && guest.cond.Reason == macvirtv1alpha1.ReasonBooting {
		guest.cond.Reason = macvirtv1alpha1.ReasonResuming
		guest.cond.Message = fmt.Sprintf("resumed on MacHost %s at %s; waiting for its guest agent to report with the new token and new SSH host keys "+
			"(one that reports the host keys it had before it was suspended is refused; bootTimeout %s)",
			m.Spec.HostName, hv.ResumedAt.UTC().Format(time.RFC3339), o.Class.Spec.Lifecycle.BootTimeoutOrDefault())
	}
	s.guest, s.recheckAfter = guest.cond, guest.recheckAfter
	switch {
	case guest.cond.Reason == macvirtv1alpha1.ReasonBootTimeout:
		return final(macvirtv1alpha1.MachineFailed, guest.cond)
	case guest.cond.Status != metav1.ConditionTrue:
		return final(macvirtv1alpha1.MachineBooting, guest.cond)
	}
	return final(macvirtv1alpha1.MachineReady, base.CondTrue("macOS is up on MacHost "+m.Spec.HostName+" and its guest agent answers"))
}

// computeHostedStatus is computeMachineStatus for a Virtualization
// machine: the host agent's report stands where KubeVirt's objects stand.
func computeHostedStatus(o machineObservation) machineStatus {
	m := o.Machine
	st := m.Status.DeepCopy()
	st.ObservedGeneration = m.Generation
	st.VirtualMachineName, st.NodeName, st.Addresses, st.RunningSince, st.Provisioning = "", "", nil, nil, nil
	if hv := m.Status.Host; hv != nil {
		// The guest's address is on the Mac's NAT network, which the
		// cluster does not reach; it stays in status.host and is never
		// published as a machine address (EndpointSlices, the tunnel).
		st.VirtualMachineName, st.RunningSince = hv.VMName, hv.RunningSince
		if p := pullProgress(hv.Pull); p != "" {
			st.Provisioning = &macvirtv1alpha1.ProvisioningStatus{Progress: p}
		}
	}
	h := observeHosted(o)
	ready := h.ready
	if o.WriteFailed != nil && h.phase != macvirtv1alpha1.MachineFailed && !o.Deleting {
		ready = base.Condition{Status: metav1.ConditionFalse, Problem: *o.WriteFailed}
	}
	st.Phase = h.phase
	set := func(t string, c base.Condition) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: c.Status,
			Reason: c.Reason, Message: c.Message, ObservedGeneration: m.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
	if !o.Deleting {
		set(macvirtv1alpha1.ConditionDisksReady, h.disks)
		set(macvirtv1alpha1.ConditionVMRunning, h.vm)
		set(macvirtv1alpha1.ConditionGuestAgentReady, h.guest)
		set(macvirtv1alpha1.ConditionClassUpToDate, classUpToDate(o))
	}
	set(macvirtv1alpha1.ConditionReady, ready)
	stall := stalled(o, h.phase, ready)
	if ready.Reason == macvirtv1alpha1.ReasonStopFailed {
		stall = base.Condition{Status: metav1.ConditionTrue, Problem: ready.Problem}
	}
	set(macvirtv1alpha1.ConditionStalled, stall)
	requeue := time.Duration(0)
	if h.phase == macvirtv1alpha1.MachineBooting || h.phase == macvirtv1alpha1.MachineReady {
		requeue = h.recheckAfter
	}
	return machineStatus{Status: *st, RequeueAfter: requeue}
}

// computeStatus computes the status of a machine of either runtime.
func computeStatus(o machineObservation) machineStatus {
	if onHost(o) {
		return computeHostedStatus(o)
	}
	return computeMachineStatus(o)
}

// pullMessage says where a host agent's pull of the machine's image
// stands, after "its host agent".
func pullMessage(p *macvirtv1alpha1.HostPullStatus) string {
	switch {
	case p.Queued:
		return fmt.Sprintf("waits for the Mac's other pulls to end before it pulls %s (the agent's --max-pulls)", p.Image)
	case p.TotalBytes > 0:
		return fmt.Sprintf("is pulling %s: %.1f of %.1f GB (%d%%)", p.Image,
			float64(p.CompletedBytes)/1e9, float64(p.TotalBytes)/1e9, p.Percent)
	case p.Percent > 0:
		return fmt.Sprintf("is pulling %s: %d%%", p.Image, p.Percent)
	}
	return fmt.Sprintf("is making the VM from %s (pulling it, if the Mac has not cached it)", p.Image)
}

// pullProgress is a pull's progress as status.provisioning.progress shows
// a KubeVirt machine's import: rounded down to a multiple of 10 %, so the
// status is not written for every percent; "" while unknown.
func pullProgress(p *macvirtv1alpha1.HostPullStatus) string {
	if p == nil || (p.TotalBytes <= 0 && p.Percent <= 0) {
		return ""
	}
	return fmt.Sprintf("%d%%", min(p.Percent, 100)/10*10)
}
