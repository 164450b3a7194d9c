package machine

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// The failure paths of a Virtualization machine reach its status in the
// host agent's (the tool's) words, and the ones that need a human stall.
func TestComputeHostedStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-time.Minute))
	beat := metav1.NewTime(now.Add(-10 * time.Second))
	longAgo := metav1.NewTime(now.Add(-time.Hour))
	resumed := metav1.NewTime(now.Add(-12 * time.Second))
	heardAtResume := metav1.NewTime(now.Add(-11 * time.Second))
	fiveAgo := metav1.NewTime(now.Add(-5 * time.Second))
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "arm"},
		Spec: macvirtv1alpha1.MacClassSpec{Runtime: macvirtv1alpha1.RuntimeVirtualization}}
	readyHost := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-a"}, Status: macvirtv1alpha1.MacHostStatus{
		Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	lostHost := readyHost.DeepCopy()
	lostHost.Status.Conditions[0].Status, lostHost.Status.Conditions[0].Reason = metav1.ConditionUnknown, macvirtv1alpha1.ReasonHostLost
	stopped := false
	for name, tc := range map[string]struct {
		hostName  string
		host      *macvirtv1alpha1.MacHost
		vm        *macvirtv1alpha1.HostVMStatus
		guest     *metav1.Time
		running   *bool
		claimed   bool
		heardAt   int32
		unplaced  string
		phase     macvirtv1alpha1.MachinePhase
		reason    string
		inMessage string
		progress  string
		stalled   metav1.ConditionStatus
	}{
		"waiting for a host": {unplaced: "no MacHost can take the machine", phase: macvirtv1alpha1.MachinePending,
			reason: macvirtv1alpha1.ReasonNoHostAvailable, inMessage: "no MacHost can take", stalled: metav1.ConditionFalse},
		"the tool could not make the VM": {hostName: "mac-a", host: readyHost,
			vm:    &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMCreating, Error: "Failed to fetch image manifest from registry."},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonHostVMFailed, inMessage: "Failed to fetch image manifest", stalled: metav1.ConditionFalse},
		"pulling its image": {hostName: "mac-a", host: readyHost,
			vm: &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMCreating, Pull: &macvirtv1alpha1.HostPullStatus{
				Image: "ghcr.io/a/xcode:26", TotalBytes: 40e9, CompletedBytes: 12e9, Percent: 30}},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonProvisioning, inMessage: "is pulling ghcr.io/a/xcode:26: 12.0 of 40.0 GB (30%)",
			progress: "30%", stalled: metav1.ConditionFalse},
		"pulling on lume, which says only a percentage": {hostName: "mac-a", host: readyHost,
			vm:    &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMCreating, Pull: &macvirtv1alpha1.HostPullStatus{Image: "ghcr.io/trycua/macos:latest", Percent: 57}},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonProvisioning, inMessage: "is pulling ghcr.io/trycua/macos:latest: 57%",
			progress: "50%", stalled: metav1.ConditionFalse},
		"its pull waits for the Mac's others": {hostName: "mac-a", host: readyHost,
			vm:    &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMCreating, Pull: &macvirtv1alpha1.HostPullStatus{Image: "ghcr.io/a/xcode:26", Queued: true}},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonProvisioning, inMessage: "--max-pulls", stalled: metav1.ConditionFalse},
		"the framework refused the start": {hostName: "mac-a", host: readyHost,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMStopped, Error: "The number of VMs exceeds the system limit"},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonHostVMFailed, inMessage: "exceeds the system limit", stalled: metav1.ConditionFalse},
		"ready": {hostName: "mac-a", host: readyHost, guest: &beat,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMRunning, RunningSince: &started},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, inMessage: "MacHost mac-a", stalled: metav1.ConditionFalse},
		"idle and suspended: Ready to bind, no heartbeat expected": {hostName: "mac-a", host: readyHost, guest: &longAgo,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMSuspended, SuspendedAt: &started},
			phase: macvirtv1alpha1.MachineSuspended, reason: macvirtv1alpha1.ReasonSuspended, inMessage: "holds no licence slot", stalled: metav1.ConditionFalse},
		"idle and being suspended: not bindable": {hostName: "mac-a", host: readyHost, guest: &beat,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMSuspending, RunningSince: &started},
			phase: macvirtv1alpha1.MachineSuspended, reason: macvirtv1alpha1.ReasonSuspending, inMessage: "saving", stalled: metav1.ConditionFalse},
		"bound and still suspended: resuming": {hostName: "mac-a", host: readyHost, guest: &longAgo, claimed: true,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMSuspended, SuspendedAt: &started},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonResuming, inMessage: "resuming", stalled: metav1.ConditionFalse},
		"resumed, its guest not heard since, though its last heartbeat is newer than the resume by the Mac's clock (behind)": {hostName: "mac-a",
			host: readyHost, guest: &fiveAgo, claimed: true,
			vm: &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMRunning, SuspendedAt: &started,
				ResumedAt: &resumed, RunningSince: &beat, Resumes: 1},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonResuming, inMessage: "new SSH host keys", stalled: metav1.ConditionFalse},
		"resumed, its guest heard before the agent saw it run": {hostName: "mac-a", host: readyHost, guest: &heardAtResume, heardAt: 1, claimed: true,
			vm: &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMRunning, SuspendedAt: &started,
				ResumedAt: &resumed, RunningSince: &beat, Resumes: 1},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, inMessage: "MacHost mac-a", stalled: metav1.ConditionFalse},
		"a stop past its grace period": {hostName: "mac-a", host: readyHost, running: &stopped,
			vm: &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMStopping, RunningSince: &started,
				Error: "macOS did not shut down within shutdownGracePeriod 5m0s; the VM is left running, never forced"},
			phase: macvirtv1alpha1.MachineStopping, reason: macvirtv1alpha1.ReasonStopFailed, inMessage: "never forced", stalled: metav1.ConditionTrue},
		"its Mac is lost": {hostName: "mac-a", host: lostHost,
			vm:    &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-x", State: macvirtv1alpha1.HostVMRunning, RunningSince: &started},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonHostLost, inMessage: "never moved", stalled: metav1.ConditionTrue},
		"its Mac is gone": {hostName: "mac-a",
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonHostLost, inMessage: "no longer exists", stalled: metav1.ConditionTrue},
	} {
		t.Run(name, func(t *testing.T) {
			m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m"},
				Spec:   macvirtv1alpha1.MacMachineSpec{ClassName: "arm", HostName: tc.hostName, Running: tc.running},
				Status: macvirtv1alpha1.MacMachineStatus{Host: tc.vm}}
			if tc.guest != nil {
				m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: tc.guest, Resumes: tc.heardAt}
			}
			if tc.claimed {
				m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "t", Name: "c"}
			}
			o := machineObservation{Now: now, Machine: m, Class: class, Host: tc.host, HostObserved: tc.hostName != ""}
			if tc.unplaced != "" {
				o.Unplaced = &base.Problem{Reason: macvirtv1alpha1.ReasonNoHostAvailable, Message: tc.unplaced}
			}
			st := computeStatus(o).Status
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			stall := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
			if st.Phase != tc.phase || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.inMessage) {
				t.Errorf("phase %s, Ready %s: %q; want %s, %s containing %q", st.Phase, ready.Reason, ready.Message, tc.phase, tc.reason, tc.inMessage)
			}
			progress := ""
			if st.Provisioning != nil {
				progress = st.Provisioning.Progress
			}
			if progress != tc.progress {
				t.Errorf("progress %q; want %q", progress, tc.progress)
			}
			if stall.Status != tc.stalled {
				t.Errorf("Stalled %s (%s); want %s", stall.Status, stall.Reason, tc.stalled)
			}
			if len(st.Addresses) != 0 {
				t.Errorf("addresses %v; a Mac's NAT address is never published", st.Addresses)
			}
		})
	}
}
