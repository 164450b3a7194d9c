package machine

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// endedVMI is an instance that ran and ended in phase, being deleted when
// deleting is true.
func endedVMI(phase kubevirtv1.VirtualMachineInstancePhase, deleting bool) *kubevirtv1.VirtualMachineInstance {
	vmi := runningVMI(t0.Add(-time.Hour))
	vmi.Status.Phase = phase
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](180)
	if deleting {
		vmi.DeletionTimestamp = &metav1.Time{Time: t0}
	}
	return vmi
}

// failedAt records the instance's Failed transition at t.
func failedAt(vmi *kubevirtv1.VirtualMachineInstance, t time.Time) *kubevirtv1.VirtualMachineInstance {
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: kubevirtv1.Failed, PhaseTransitionTimestamp: metav1.NewTime(t)})
	return vmi
}

func stopped(m *macvirtv1alpha1.MacMachine) { m.Spec.Running = ptr.To(false) }

func withCondition(t, reason, msg string) func(*macvirtv1alpha1.MacMachine) {
	return func(m *macvirtv1alpha1.MacMachine) {
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	}
}

func TestComputeMachineStatusPower(t *testing.T) {
	disks := []*cdiv1.DataVolume{dv("m-opencore", cdiv1.Succeeded, "100.0%"), dv("m-system", cdiv1.Succeeded, "100.0%")}
	halted := vm(kubevirtv1.RunStrategyHalted, kubevirtv1.VirtualMachineStatusStopping)
	always := vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusStopped)
	forcedBefore := withCondition(macvirtv1alpha1.ConditionReady, macvirtv1alpha1.ReasonForcedPowerOff, "macOS did not shut down")
	shutBefore := withCondition(macvirtv1alpha1.ConditionVMRunning, macvirtv1alpha1.ReasonGuestShutDown, "macOS shut itself down")
	pending := &kubevirtv1.VirtualMachineInstance{}
	pending.Status.Phase = kubevirtv1.Pending
	for name, tc := range map[string]struct {
		obs     machineObservation
		phase   macvirtv1alpha1.MachinePhase
		reason  string
		stalled metav1.ConditionStatus
		message string
	}{
		"a stop killed at the end of the grace period": {obs: machineObservation{Machine: machine(stopped), VM: halted, VMI: endedVMI(kubevirtv1.Failed, true)},
			phase: macvirtv1alpha1.MachineStopped, reason: macvirtv1alpha1.ReasonForcedPowerOff, stalled: metav1.ConditionTrue,
			message: `terminationGracePeriodSeconds (180s) after the graceful stop, so KubeVirt killed it (VirtualMachineInstance m is Failed: "The VirtualMachineInstance crashed.")`},
		"killed and gone before the operator looked: the watch's copy reports it": {obs: machineObservation{Machine: machine(stopped), VM: halted,
			Killed: endedVMI(kubevirtv1.Failed, true)},
			phase: macvirtv1alpha1.MachineStopped, reason: macvirtv1alpha1.ReasonForcedPowerOff, stalled: metav1.ConditionTrue,
			message: "so KubeVirt killed it"},
		"the killed instance is gone: the forced power-off stays": {obs: machineObservation{Machine: machine(stopped, forcedBefore), VM: halted},
			phase: macvirtv1alpha1.MachineStopped, reason: macvirtv1alpha1.ReasonForcedPowerOff, stalled: metav1.ConditionTrue},
		"killed a grace period after its deletion began": {obs: machineObservation{Machine: machine(stopped), VM: halted,
			VMI: failedAt(endedVMI(kubevirtv1.Failed, true), t0.Add(180*time.Second))},
			phase: macvirtv1alpha1.MachineStopped, reason: macvirtv1alpha1.ReasonForcedPowerOff, stalled: metav1.ConditionTrue},
		// virt-controller deletes a failed instance to start another; the
		// machine deleted meanwhile is stopped, not killed.
		"a crashed instance KubeVirt deletes, the machine then deleted": {obs: machineObservation{Machine: machine(), VM: always,
			VMI: failedAt(endedVMI(kubevirtv1.Failed, true), t0), Deleting: true},
			phase: macvirtv1alpha1.MachineTerminating, reason: macvirtv1alpha1.ReasonDeleting, stalled: metav1.ConditionFalse},
		"a clean stop": {obs: machineObservation{Machine: machine(stopped), VM: halted, VMI: endedVMI(kubevirtv1.Succeeded, true)},
			phase: macvirtv1alpha1.MachineStopping, reason: macvirtv1alpha1.ReasonStopping, stalled: metav1.ConditionFalse},
		"started again after a forced power-off": {obs: machineObservation{Machine: machine(forcedBefore), VM: always},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonStarting, stalled: metav1.ConditionFalse},
		"a running machine's instance failed: not a stop": {obs: machineObservation{Machine: machine(), VM: always, VMI: endedVMI(kubevirtv1.Failed, true)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonInstanceFailed, stalled: metav1.ConditionFalse},
		"macOS shut itself down": {obs: machineObservation{Machine: machine(), VM: always, VMI: endedVMI(kubevirtv1.Succeeded, false)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonGuestShutDown, stalled: metav1.ConditionFalse,
			message: "macOS shut itself down (VirtualMachineInstance m is Succeeded); KubeVirt starts it again, as runStrategy Always asks"},
		"its instance deleted by KubeVirt": {obs: machineObservation{Machine: machine(), VM: always, VMI: endedVMI(kubevirtv1.Succeeded, true)},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonGuestShutDown, stalled: metav1.ConditionFalse},
		"no instance yet after a shutdown": {obs: machineObservation{Machine: machine(shutBefore), VM: always},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonGuestShutDown, stalled: metav1.ConditionFalse},
		"the new instance is pending": {obs: machineObservation{Machine: machine(shutBefore), VM: always, VMI: pending},
			phase: macvirtv1alpha1.MachineStarting, reason: macvirtv1alpha1.ReasonGuestShutDown, stalled: metav1.ConditionFalse},
		"the new instance runs: booting": {obs: machineObservation{Machine: machine(shutBefore, withHeartbeat(t0.Add(-time.Hour))), VM: always,
			VMI: runningVMI(t0)}, phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonBooting, stalled: metav1.ConditionFalse},
	} {
		tc.obs.Now, tc.obs.Class, tc.obs.DataVolumes = t0, class(), disks
		st := computeMachineStatus(tc.obs).Status
		if st.Phase != tc.phase {
			t.Errorf("%s: phase %s, want %s", name, st.Phase, tc.phase)
		}
		ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
		if ready.Reason != tc.reason {
			t.Errorf("%s: Ready reason %s (%s), want %s", name, ready.Reason, ready.Message, tc.reason)
		}
		if tc.message != "" && !strings.Contains(ready.Message, tc.message) {
			t.Errorf("%s: Ready message %q, want it to hold %q", name, ready.Message, tc.message)
		}
		if s := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled); s.Status != tc.stalled {
			t.Errorf("%s: Stalled %s (%s), want %s", name, s.Status, s.Reason, tc.stalled)
		}
	}
}

func TestTheWatchKeepsAKilledInstanceForItsMachine(t *testing.T) {
	r := &Reconciler{}
	killed := endedVMI(kubevirtv1.Failed, true)
	killed.Labels = map[string]string{macvirtv1alpha1.LabelMachine: "m"}
	reqs := r.vmiToMachine(context.Background(), killed)
	if len(reqs) != 1 || reqs[0].Name != "m" {
		t.Fatalf("vmiToMachine = %v, want the machine m", reqs)
	}
	if _, _, ok := r.killed.Get(reqs[0].NamespacedName, time.Now()); !ok {
		t.Errorf("the killed instance was not kept for machine m")
	}
	clean := endedVMI(kubevirtv1.Succeeded, true)
	clean.Labels = map[string]string{macvirtv1alpha1.LabelMachine: "n"}
	reqs = r.vmiToMachine(context.Background(), clean)
	if _, _, ok := r.killed.Get(reqs[0].NamespacedName, time.Now()); ok {
		t.Errorf("a clean stop was kept as killed")
	}
}

// A machine deleted while KubeVirt deletes its crashed instance to start
// another (runStrategy Always) was not stopped into a kill: no forced
// power-off is counted or announced, and no First Aid advised.
func TestACrashedInstanceKubeVirtDeletesIsNoForcedPowerOff(t *testing.T) {
	crashed := failedAt(endedVMI(kubevirtv1.Failed, true), t0)
	o := machineObservation{Machine: machine(), VMI: crashed, Deleting: true, Now: t0}
	if vmi := killedByStop(o); vmi != nil {
		t.Errorf("an instance Failed at %s and deleted at %s is reported killed by a stop", t0, t0)
	}
	if c, ok := forcedPowerOff(o); ok {
		t.Errorf("forced power-off reported: %s", c.Message)
	}
	killed := failedAt(endedVMI(kubevirtv1.Failed, true), t0.Add(3*time.Minute))
	o.VMI = killed
	if killedByStop(o) == nil {
		t.Error("an instance Failed a grace period after its deletion began is not reported killed")
	}
}

// A forced power-off is announced once per instance by each operator: the
// record of what was reported is the reconciler's, not the process's, so
// a second operator in the same process (a test's, a hand-over's) still
// announces it.
func TestAForcedPowerOffIsAnnouncedOncePerReconciler(t *testing.T) {
	halted := vm(kubevirtv1.RunStrategyHalted, kubevirtv1.VirtualMachineStatusStopping)
	o := &machineObservation{Machine: machine(stopped), VM: halted, VMI: endedVMI(kubevirtv1.Failed, true), Now: t0}
	for _, name := range []string{"first", "second"} {
		rec := events.NewFakeRecorder(8)
		r := &Reconciler{Recorder: rec}
		r.reportForcedPowerOff(o)
		r.reportForcedPowerOff(o)
		if got := strings.Count(controllertest.Events(rec), macvirtv1alpha1.ReasonForcedPowerOff); got != 1 {
			t.Errorf("%s reconciler: %d ForcedPowerOff events for one instance, want 1", name, got)
		}
	}
}
