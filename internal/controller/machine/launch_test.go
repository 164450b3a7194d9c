package machine

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func vmiIn(phase kubevirtv1.VirtualMachineInstancePhase, conds ...kubevirtv1.VirtualMachineInstanceCondition) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace = "m", "ns"
	vmi.Status.Phase = phase
	vmi.Status.Conditions = conds
	return vmi
}

func withStartFailures(v *kubevirtv1.VirtualMachine, n int) *kubevirtv1.VirtualMachine {
	retry := metav1.NewTime(t0.Add(time.Minute))
	v.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: n, RetryAfterTimestamp: &retry}
	return v
}

func TestComputeMachineStatusLaunch(t *testing.T) {
	succeeded := []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.Succeeded, "100.0%")}
	importing := []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.ImportInProgress, "45.20%")}
	pullBackOff := kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized,
		Status: corev1.ConditionFalse, Reason: "ImagePullBackOff", Message: `Back-off pulling image "ghcr.io/macvirt/hook:typo"`}
	paused := kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstancePaused,
		Status: corev1.ConditionTrue, Reason: "PausedByUser", Message: "VMI was paused by user"}
	refused := vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting)
	refused.Status.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineFailure,
		Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "Failure while starting VMI: sidecar feature gate is not enabled"}}
	migrating := runningVMI(t0)
	start := metav1.NewTime(t0.Add(4 * time.Minute))
	migrating.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &start}
	lost := vmiIn(kubevirtv1.Failed)
	lost.Status.Reason = "NodeUnresponsive"

	scheduled := func(at time.Time) *kubevirtv1.VirtualMachineInstance {
		v := vmiIn(kubevirtv1.Scheduled)
		v.UID = "vmi-uid"
		v.Status.PhaseTransitionTimestamps = []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: kubevirtv1.Scheduling, PhaseTransitionTimestamp: metav1.NewTime(at)},
			{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: metav1.NewTime(at.Add(time.Second))}}
		return v
	}
	boot := macvirtv1alpha1.DefaultBootTimeout
	cases := map[string]struct {
		obs     machineObservation
		phase   macvirtv1alpha1.MachinePhase
		reason  string
		message string
		stalled metav1.ConditionStatus
	}{
		"an image cannot be pulled": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusImagePullBackOff), VMI: vmiIn(kubevirtv1.Scheduling, pullBackOff)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonImagePullFailed,
			message: `Back-off pulling image "ghcr.io/macvirt/hook:typo"`, stalled: metav1.ConditionTrue},
		"virt-api refuses the instance": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded, VM: refused},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonInstanceCreateFailed,
			message: "sidecar feature gate is not enabled", stalled: metav1.ConditionTrue},
		"one failed start is retried, not condemned": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: withStartFailures(vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusCrashLoopBackOff), 1)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStartFailed,
			message: "KubeVirt retries at 2026-11-30T12:01:00Z", stalled: metav1.ConditionFalse},
		"three failed starts are a crash loop": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: withStartFailures(vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusCrashLoopBackOff), 3)},
			phase: macvirtv1alpha1.MachineFailed, reason: macvirtv1alpha1.ReasonCrashLoop, stalled: metav1.ConditionTrue},
		"an instance failed while its disks import": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: importing,
			VM: withStartFailures(vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusProvisioning), 1), VMI: vmiIn(kubevirtv1.Failed)},
			phase: macvirtv1alpha1.MachineProvisioning, reason: macvirtv1alpha1.ReasonProvisioning, stalled: metav1.ConditionFalse},
		"paused": {obs: machineObservation{Now: t0.Add(5 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusPaused),
			VMI: func() *kubevirtv1.VirtualMachineInstance {
				v := runningVMI(t0)
				v.Status.Conditions = append(v.Status.Conditions, paused)
				return v
			}()},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonPaused,
			message: "virtctl unpause vmi m -n", stalled: metav1.ConditionTrue},
		"migrating is no failure": {obs: machineObservation{Now: t0.Add(5 * time.Minute), Machine: machine(withHeartbeat(t0.Add(4 * time.Minute))),
			Class: class(), DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusMigrating), VMI: migrating},
			phase: macvirtv1alpha1.MachineReady, reason: macvirtv1alpha1.ReasonAsExpected, stalled: metav1.ConditionFalse},
		"a placed pod whose domain does not start within bootTimeout": {obs: machineObservation{Now: t0.Add(time.Second + boot), Machine: machine(), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting), VMI: scheduled(t0)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStartTimeout,
			message: "kubevirt.io/created-by=vmi-uid", stalled: metav1.ConditionTrue},
		"a placed pod starting for less than bootTimeout": {obs: machineObservation{Now: t0.Add(boot), Machine: machine(), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting), VMI: scheduled(t0)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStarting, stalled: metav1.ConditionFalse},
		"time unschedulable before the pod was placed does not count": {obs: machineObservation{Now: t0.Add(time.Hour), Machine: machine(), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting),
			VMI: func() *kubevirtv1.VirtualMachineInstance {
				v := scheduled(t0)
				v.Status.PhaseTransitionTimestamps[1].PhaseTransitionTimestamp = metav1.NewTime(t0.Add(time.Hour - time.Minute))
				return v
			}()},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStarting, stalled: metav1.ConditionFalse},
		"an operator restart does not restart the clock": {obs: machineObservation{Now: t0.Add(time.Second + boot), ListeningSince: t0.Add(boot),
			Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting), VMI: scheduled(t0)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStartTimeout, stalled: metav1.ConditionTrue},
		"a pod not yet placed has no start timeout": {obs: machineObservation{Now: t0.Add(time.Hour), Machine: machine(), Class: class(),
			DataVolumes: succeeded, VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting), VMI: func() *kubevirtv1.VirtualMachineInstance {
				v := scheduled(t0)
				v.Status.Phase = kubevirtv1.Scheduling
				return v
			}()},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStarting, stalled: metav1.ConditionFalse},
		"its node was lost": {obs: machineObservation{Machine: machine(), Class: class(), DataVolumes: succeeded,
			VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStopped), VMI: lost},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonInstanceFailed,
			message: "reason NodeUnresponsive", stalled: metav1.ConditionFalse},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := computeMachineStatus(tc.obs).Status
			if got.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", got.Phase, tc.phase)
			}
			ready := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.reason {
				t.Fatalf("Ready = %+v, want reason %s", ready, tc.reason)
			}
			if !contains(ready.Message, tc.message) {
				t.Errorf("Ready message %q does not say %q", ready.Message, tc.message)
			}
			if s := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionStalled); s == nil || s.Status != tc.stalled {
				t.Errorf("Stalled = %+v, want %s", s, tc.stalled)
			}
		})
	}
}

func TestLaunchWarning(t *testing.T) {
	status := func(reason string) *macvirtv1alpha1.MacMachineStatus {
		return &macvirtv1alpha1.MacMachineStatus{Conditions: []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: reason, Message: "m"}}}
	}
	cases := map[string]struct {
		before, after *macvirtv1alpha1.MacMachineStatus
		want          bool
	}{
		"entering a failed pull":      {before: status(macvirtv1alpha1.ReasonStarting), after: status(macvirtv1alpha1.ReasonImagePullFailed), want: true},
		"still failing to pull":       {before: status(macvirtv1alpha1.ReasonImagePullFailed), after: status(macvirtv1alpha1.ReasonImagePullFailed)},
		"a refused instance":          {before: &macvirtv1alpha1.MacMachineStatus{}, after: status(macvirtv1alpha1.ReasonInstanceCreateFailed), want: true},
		"an ordinary start":           {before: status(macvirtv1alpha1.ReasonPending), after: status(macvirtv1alpha1.ReasonStarting)},
		"a failed instance restarted": {before: status(macvirtv1alpha1.ReasonAsExpected), after: status(macvirtv1alpha1.ReasonInstanceFailed), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, got := launchWarning(tc.before, tc.after); got != tc.want {
				t.Errorf("launchWarning = %v, want %v", got, tc.want)
			}
		})
	}
}

func contains(s, sub string) bool { return sub == "" || strings.Contains(s, sub) }

func TestAStartIsLookedAtAgainWhenItWouldTimeOut(t *testing.T) {
	v := vmiIn(kubevirtv1.Scheduled)
	v.Status.PhaseTransitionTimestamps = []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: kubevirtv1.Scheduled, PhaseTransitionTimestamp: metav1.NewTime(t0)}}
	succeeded := []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.Succeeded, "100.0%")}
	boot := macvirtv1alpha1.DefaultBootTimeout
	got := computeMachineStatus(machineObservation{Now: t0.Add(time.Minute), Machine: machine(), Class: class(), DataVolumes: succeeded,
		VM: vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStarting), VMI: v})
	if got.RequeueAfter != boot-time.Minute {
		t.Errorf("RequeueAfter = %s, want %s (when the start times out)", got.RequeueAfter, boot-time.Minute)
	}
}
