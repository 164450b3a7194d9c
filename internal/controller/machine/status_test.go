package machine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func dv(name string, phase cdiv1.DataVolumePhase, progress string) *cdiv1.DataVolume {
	d := &cdiv1.DataVolume{}
	d.Name, d.Status.Phase, d.Status.Progress = name, phase, cdiv1.DataVolumeProgress(progress)
	return d
}

func runningVMI(since time.Time) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Name = "m"
	vmi.Status.Phase = kubevirtv1.Running
	vmi.Status.NodeName = "apple-1"
	vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{IP: "10.0.0.7"}}
	vmi.Status.PhaseTransitionTimestamps = []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: kubevirtv1.Running, PhaseTransitionTimestamp: metav1.NewTime(since)}}
	return vmi
}

func vm(strategy kubevirtv1.VirtualMachineRunStrategy, printable kubevirtv1.VirtualMachinePrintableStatus) *kubevirtv1.VirtualMachine {
	v := &kubevirtv1.VirtualMachine{}
	v.Name = "m"
	v.Spec.RunStrategy = &strategy
	v.Status.PrintableStatus = printable
	return v
}

func machine(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	m.Name, m.Namespace, m.Generation = "m", "ns", 3
	for _, mod := range mods {
		mod(m)
	}
	return m
}

func withHeartbeat(at time.Time) func(*macvirtv1alpha1.MacMachine) {
	return func(m *macvirtv1alpha1.MacMachine) {
		ts := metav1.NewTime(at)
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &ts}
	}
}

// withInterval records the interval the guest was told with its heartbeat.
func withInterval(d time.Duration) func(*macvirtv1alpha1.MacMachine) {
	return func(m *macvirtv1alpha1.MacMachine) {
		m.Status.Guest.HeartbeatIntervalSeconds = int32(d / time.Second) //nolint:gosec // a test's intervals are small.
	}
}

func class() *macvirtv1alpha1.MacClass { return &macvirtv1alpha1.MacClass{} }

func TestComputeMachineStatus(t *testing.T) {
	succeeded := []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.Succeeded, "100.0%")}
	cases := map[string]struct {
		obs        machineObservation
		phase      macvirtv1alpha1.MachinePhase
		reason     string
		stalled    metav1.ConditionStatus
		requeueMax time.Duration
	}{
		"no class": {obs: machineObservation{Machine: machine()},
			phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonClassNotFound, stalled: metav1.ConditionFalse},
		"blocked by an unreadable secret": {obs: machineObservation{Machine: machine(), Class: class(),
			Blocked: &base.Problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable, Message: "forbidden"}},
			phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonSecretUnavailable, stalled: metav1.ConditionTrue},
		"disks not created": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: []*cdiv1.DataVolume{nil, nil}},
			phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonPending, stalled: metav1.ConditionFalse},
		"importing": {obs: machineObservation{Machine: machine(), Class: class(),
			DataVolumes: []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.ImportInProgress, "45.20%")}},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonProvisioning, stalled: metav1.ConditionFalse},
		"a disk failed": {obs: machineObservation{Machine: machine(), Class: class(),
			DataVolumes: []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Failed, ""), dv("m-system", cdiv1.ImportInProgress, "10%")}},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonDataVolumeFailed, stalled: metav1.ConditionTrue},
		"VM starting": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStarting, stalled: metav1.ConditionFalse},
		"crash loop": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusCrashLoopBackOff)},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonCrashLoop, stalled: metav1.ConditionTrue},
		"booting": {obs: machineObservation{Now: t0.Add(time.Minute), Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonBooting, stalled: metav1.ConditionFalse,
			requeueMax: 19 * time.Minute},
		"boot timed out": {obs: machineObservation{Now: t0.Add(21 * time.Minute), Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonBootTimeout, stalled: metav1.ConditionTrue},
		"a heartbeat from a previous boot does not count": {obs: machineObservation{Now: t0.Add(time.Minute),
			Machine: machine(withHeartbeat(t0.Add(-time.Minute))), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonBooting, stalled: metav1.ConditionFalse,
			requeueMax: 19 * time.Minute},
		"ready": {obs: machineObservation{Now: t0.Add(5 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, stalled: metav1.ConditionFalse,
			requeueMax: time.Minute},
		// A guest told a 30s interval has its steady beats written once the
		// written one is 37.5s old: the unwritten ones came within that.
		"a heartbeat written up to heartbeatTimeout and the write gap ago": {obs: machineObservation{
			Now: t0.Add(4*time.Minute + 2*time.Minute + 37*time.Second), Machine: machine(withHeartbeat(t0.Add(4*time.Minute)), withInterval(30*time.Second)),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, stalled: metav1.ConditionFalse,
			requeueMax: time.Second},
		"silent past heartbeatTimeout and the write gap": {obs: machineObservation{
			Now: t0.Add(4*time.Minute + 2*time.Minute + 38*time.Second), Machine: machine(withHeartbeat(t0.Add(4*time.Minute)), withInterval(30*time.Second)),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonHeartbeatStale, stalled: metav1.ConditionFalse},
		// The gap is the recorded interval's, not the class's now: a
		// timeout cut from 4m (60s beats) to 1m after a beat was left
		// unwritten does not judge the guest silent before its next beat.
		"a cut heartbeatTimeout waits for the interval the guest was told": {obs: machineObservation{
			Now: t0.Add(4*time.Minute + 119*time.Second), Machine: machine(withHeartbeat(t0.Add(4*time.Minute)), withInterval(time.Minute)),
			Class: &macvirtv1alpha1.MacClass{Spec: macvirtv1alpha1.MacClassSpec{Lifecycle: macvirtv1alpha1.LifecycleSpec{
				HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}}}},
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, stalled: metav1.ConditionFalse,
			requeueMax: time.Minute},
		"a heartbeat recorded with no interval (an earlier operator wrote every beat)": {obs: machineObservation{
			Now: t0.Add(4*time.Minute + 2*time.Minute + time.Second), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonHeartbeatStale, stalled: metav1.ConditionFalse},
		"heartbeat stale": {obs: machineObservation{Now: t0.Add(10 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonHeartbeatStale, stalled: metav1.ConditionFalse},
		"an operator outage is not the guest's silence": {obs: machineObservation{Now: t0.Add(10 * time.Minute),
			ListeningSince: t0.Add(9 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, stalled: metav1.ConditionFalse,
			requeueMax: time.Minute},
		"silent for a heartbeatTimeout after the endpoint opened": {obs: machineObservation{Now: t0.Add(12 * time.Minute),
			ListeningSince: t0.Add(9 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonHeartbeatStale, stalled: metav1.ConditionFalse},
		"a guest judged silent stays silent across an operator restart": {obs: machineObservation{Now: t0.Add(10 * time.Minute),
			ListeningSince: t0.Add(9 * time.Minute), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0),
			Machine: machine(withHeartbeat(t0.Add(4*time.Minute)), func(m *macvirtv1alpha1.MacMachine) {
				m.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionGuestAgentReady, Status: metav1.ConditionFalse,
					Reason: macvirtv1alpha1.ReasonHeartbeatStale, Message: "silent"}}
			})},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonHeartbeatStale, stalled: metav1.ConditionFalse},
		"a boot during an operator outage is timed from the endpoint's opening": {obs: machineObservation{Now: t0.Add(21 * time.Minute),
			ListeningSince: t0.Add(20 * time.Minute), Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonBooting, stalled: metav1.ConditionFalse,
			requeueMax: 19 * time.Minute},
		"a refused create shows in the API server's words": {obs: machineObservation{Machine: machine(), Class: class(),
			DataVolumes: []*cdiv1.DataVolume{nil, nil}, WriteFailed: &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: "exceeded quota"}},
			phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonCreateFailed, stalled: metav1.ConditionTrue},
		"stopping": {obs: machineObservation{Machine: machine(func(m *macvirtv1alpha1.MacMachine) { f := false; m.Spec.Running = &f }),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyHalted, kubevirtv1.VirtualMachineStatusStopping), VMI: runningVMI(t0)},
			phase: macvirtv1alpha1.MachineStopping, reason: macvirtv1alpha1.ReasonStopping, stalled: metav1.ConditionFalse},
		"stopped": {obs: machineObservation{Machine: machine(func(m *macvirtv1alpha1.MacMachine) { f := false; m.Spec.Running = &f }),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyHalted, kubevirtv1.VirtualMachineStatusStopped)},
			phase: macvirtv1alpha1.MachineStopped, reason: macvirtv1alpha1.ReasonStopped, stalled: metav1.ConditionFalse},
		"stop failed while deleting": {obs: machineObservation{Machine: machine(), Deleting: true, DeletionStep: "x",
			StopError: errors.New("403")},
			phase: macvirtv1alpha1.MachineTerminating, reason: macvirtv1alpha1.ReasonDeleting, stalled: metav1.ConditionTrue},
		"objects under its names it does not control": {obs: machineObservation{Machine: machine(), Class: class(),
			DataVolumes: []*cdiv1.DataVolume{nil, nil}, Foreign: []string{"VirtualMachine ns/m (its controller: none)"}},
			phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue},
		"deleting leaves what it does not control alone": {obs: machineObservation{Machine: machine(), Deleting: true, DeletionStep: "done",
			Foreign: []string{"DataVolume ns/m-system (its controller: none)"}},
			phase: macvirtv1alpha1.MachineTerminating, reason: macvirtv1alpha1.ReasonDeleting, stalled: metav1.ConditionFalse},
		"a failed machine stays failed beside objects it does not control": {obs: machineObservation{Class: class(),
			Foreign: []string{"VirtualMachine ns/m (its controller: none)"}, Machine: machine(func(m *macvirtv1alpha1.MacMachine) {
				m.Status.Phase = macvirtv1alpha1.MachineFailed
				m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False", Reason: macvirtv1alpha1.ReasonBootTimeout, Message: "late"}}
			})},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonBootTimeout, stalled: metav1.ConditionTrue},
		"failed stays failed": {obs: machineObservation{Now: t0, Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0),
			Machine: machine(withHeartbeat(t0), func(m *macvirtv1alpha1.MacMachine) {
				m.Status.Phase = macvirtv1alpha1.MachineFailed
				m.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False", Reason: macvirtv1alpha1.ReasonBootTimeout, Message: "late"}}
			})},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonBootTimeout, stalled: metav1.ConditionTrue},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := computeMachineStatus(tc.obs)
			if got.Status.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", got.Status.Phase, tc.phase)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.reason || ready.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want reason %s at generation 3", ready, tc.reason)
			}
			if s := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionStalled); s == nil || s.Status != tc.stalled {
				t.Errorf("Stalled = %+v, want %s", s, tc.stalled)
			}
			if got.RequeueAfter > tc.requeueMax {
				t.Errorf("requeue after %s, want at most %s", got.RequeueAfter, tc.requeueMax)
			}
			if tc.requeueMax > 0 && got.RequeueAfter <= 0 {
				t.Errorf("no requeue for a timeout no watch reports")
			}
			// status.guest is the agent endpoint's: the machine's status
			// write, a merge patch from the copy read, leaves it as it was.
			if !equality.Semantic.DeepEqual(got.Status.Guest, tc.obs.Machine.Status.Guest) {
				t.Errorf("status.guest = %+v, want it as read: %+v", got.Status.Guest, tc.obs.Machine.Status.Guest)
			}
		})
	}
}

func TestComputeMachineStatusReportsProgressNodeAndAddresses(t *testing.T) {
	got := computeMachineStatus(machineObservation{Machine: machine(), Class: class(),
		DataVolumes: []*cdiv1.DataVolume{dv("a", cdiv1.ImportInProgress, "80.00%"), dv("b", cdiv1.CloneInProgress, "45.20%")}})
	if got.Status.Provisioning == nil || got.Status.Provisioning.Progress != "40%" {
		t.Errorf("progress = %+v, want the slowest disk's 45.20%% in 10 %% steps", got.Status.Provisioning)
	}
	got = computeMachineStatus(machineObservation{Now: t0, Machine: machine(), Class: class(),
		DataVolumes: []*cdiv1.DataVolume{dv("a", cdiv1.Succeeded, ""), dv("b", cdiv1.Succeeded, "")},
		VM:          vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)})
	if got.Status.NodeName != "apple-1" || len(got.Status.Addresses) != 1 || got.Status.Addresses[0] != "10.0.0.7" || got.Status.Provisioning != nil {
		t.Errorf("status = %+v, want node apple-1, address 10.0.0.7 and no progress", got.Status)
	}
}

func TestComputeMachineStatusIsStableForAnUnchangedMachine(t *testing.T) {
	obs := machineObservation{Now: t0.Add(5 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))), Class: class(),
		DataVolumes: []*cdiv1.DataVolume{dv("a", cdiv1.Succeeded, ""), dv("b", cdiv1.Succeeded, "")},
		VM:          vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)}
	first := computeMachineStatus(obs)
	obs.Machine.Status = first.Status
	obs.Now = obs.Now.Add(30 * time.Second)
	second := computeMachineStatus(obs)
	for i := range first.Status.Conditions {
		a, b := first.Status.Conditions[i], second.Status.Conditions[i]
		if a.Message != b.Message || a.Status != b.Status || !a.LastTransitionTime.Equal(&b.LastTransitionTime) {
			t.Errorf("condition %s changed with only time passing: %+v -> %+v", a.Type, a, b)
		}
	}
}

func TestComputeMachineStatusReportsItsClass(t *testing.T) {
	ready := func(p *base.Problem) machineObservation {
		return machineObservation{Now: t0.Add(5 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4*time.Minute)),
			func(m *macvirtv1alpha1.MacMachine) { m.Spec.ClassName, m.Spec.ClassRevision = "sonoma", "abc" }),
			Class: class(), ClassProblem: p, DataVolumes: []*cdiv1.DataVolume{dv("a", cdiv1.Succeeded, ""), dv("b", cdiv1.Succeeded, "")},
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), VMI: runningVMI(t0)}
	}
	deleted := &base.Problem{Reason: macvirtv1alpha1.ReasonClassNotFound, Message: "MacClass \"sonoma\" was deleted; the machine keeps its revision abc"}
	changed := &base.Problem{Reason: macvirtv1alpha1.ReasonClassChanged, Message: "MacClass \"sonoma\" is at revision def"}
	neither := ready(nil)
	neither.Class = nil
	deleting := ready(nil)
	deleting.Deleting, deleting.DeletionStep = true, "x"
	deleting.Machine.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionClassUpToDate,
		Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonClassChanged, Message: "as it was"}}
	cases := map[string]struct {
		obs         machineObservation
		phase       macvirtv1alpha1.MachinePhase
		classStatus metav1.ConditionStatus
		classReason string
		message     string
	}{
		"the class is at the machine's revision": {obs: ready(nil), phase: macvirtv1alpha1.MachineReady,
			classStatus: metav1.ConditionTrue, classReason: macvirtv1alpha1.ReasonAsExpected, message: "abc"},
		"the class was deleted; its revision was kept": {obs: ready(deleted), phase: macvirtv1alpha1.MachineReady,
			classStatus: metav1.ConditionFalse, classReason: macvirtv1alpha1.ReasonClassNotFound, message: deleted.Message},
		"the class changed; the machine's revision was kept": {obs: ready(changed), phase: macvirtv1alpha1.MachineReady,
			classStatus: metav1.ConditionFalse, classReason: macvirtv1alpha1.ReasonClassChanged, message: changed.Message},
		"neither the class nor its revision exists": {obs: neither, phase: macvirtv1alpha1.MachinePending,
			classStatus: metav1.ConditionFalse, classReason: macvirtv1alpha1.ReasonClassNotFound, message: "revision abc"},
		"deleting keeps what was known": {obs: deleting, phase: macvirtv1alpha1.MachineTerminating,
			classStatus: metav1.ConditionFalse, classReason: macvirtv1alpha1.ReasonClassChanged, message: "as it was"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := computeMachineStatus(tc.obs)
			if got.Status.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", got.Status.Phase, tc.phase)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionClassUpToDate)
			if c == nil || c.Status != tc.classStatus || c.Reason != tc.classReason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("ClassUpToDate = %+v, want %s %s saying %q", c, tc.classStatus, tc.classReason, tc.message)
			}
			if tc.phase == macvirtv1alpha1.MachineReady {
				if s := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionStalled); s == nil || s.Status != metav1.ConditionFalse {
					t.Errorf("Stalled = %+v, want False: a machine running from its kept revision needs nobody", s)
				}
			}
		})
	}
}
