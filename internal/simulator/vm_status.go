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

package simulator

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// dvSummary is what the VirtualMachine controller needs to know about the
// DataVolumes a VirtualMachine's volumes reference.
type dvSummary struct {
	// templatesReady is true when every DataVolume of
	// spec.dataVolumeTemplates exists and Succeeded: only those hold the
	// instance's creation back.
	templatesReady bool
	// provisioning is true when a referenced DataVolume exists and is still
	// being populated.
	provisioning bool
	// failure describes a referenced DataVolume that failed, if any.
	failure string
}

// vmView gathers everything a VirtualMachine's decisions depend on.
type vmView struct {
	vm      *kubevirtv1.VirtualMachine
	vmi     *kubevirtv1.VirtualMachineInstance // nil when there is none
	dvs     dvSummary
	now     time.Time
	backoff time.Duration // base crash-loop backoff
	// jitter draws the backoff's random extra, up to its argument; nil for none.
	jitter func(time.Duration) time.Duration
	// refusal is virt-api's refusal of the instance about to be created.
	refusal string
}

// vmAction is what the VirtualMachine controller does to the instance.
type vmAction int

const (
	actNone vmAction = iota
	actCreate
	actDelete
)

// decideVM chooses the action virt-controller would take for the run
// strategy, and how long to wait before looking again when the start is
// held back by a crash-loop backoff.
func decideVM(v vmView) (vmAction, time.Duration) {
	strategy, err := v.vm.RunStrategy()
	if err != nil || v.vm.Spec.Template == nil {
		return actNone, 0
	}
	if v.vmi != nil {
		if v.vmi.DeletionTimestamp != nil {
			return actNone, 0
		}
		// pkg/virt-controller/watch/vm/vm.go (syncRunStrategy): a stop
		// request recorded by virt-api for this instance stops it whatever
		// the strategy (Always then starts a new one); RerunOnFailure also
		// removes a Succeeded instance, without starting another.
		stopRequested := hasStopRequestFor(v.vm, v.vmi)
		switch {
		case strategy == kubevirtv1.RunStrategyHalted,
			strategy == kubevirtv1.RunStrategyAlways && (v.vmi.IsFinal() || stopRequested),
			strategy == kubevirtv1.RunStrategyRerunOnFailure && (v.vmi.IsFinal() || stopRequested),
			strategy == kubevirtv1.RunStrategyManual && stopRequested:
			return actDelete, 0
		}
		return actNone, 0
	}
	// pkg/virt-controller/watch/vm/vm.go (startVMI, handleDataVolumes):
	// only templated DataVolumes delay the start; an instance whose
	// standalone DataVolumes still populate is created at once and waits in
	// phase Pending.
	if !setToStart(v.vm, strategy) || !v.dvs.templatesReady {
		return actNone, 0
	}
	if left := backoffLeft(v.vm.Status.StartFailure, v.now); left > 0 {
		return actNone, left
	}
	return actCreate, 0
}

// setToStart reports whether virt-controller starts an instance for a
// VirtualMachine that has none (pkg/virt-controller/watch/vm/vm.go,
// syncRunStrategy): Always and Once do; RerunOnFailure only on a start
// request or when the strategy was just switched to (status.runStrategy
// differs), so it stays stopped after a stop request; Manual only on a
// start request.
func setToStart(vm *kubevirtv1.VirtualMachine, strategy kubevirtv1.VirtualMachineRunStrategy) bool {
	switch strategy {
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyOnce:
		return true
	case kubevirtv1.RunStrategyRerunOnFailure:
		return hasStartRequest(vm) || vm.Status.RunStrategy != strategy
	case kubevirtv1.RunStrategyManual:
		return hasStartRequest(vm)
	}
	return false
}

// hasStartRequest reports a start request at the head of the VirtualMachine's
// state change requests (pkg/virt-controller/watch/vm/vm.go, hasStartRequest).
func hasStartRequest(vm *kubevirtv1.VirtualMachine) bool {
	r := vm.Status.StateChangeRequests
	return len(r) > 0 && r[0].Action == kubevirtv1.StartRequest
}

// hasStopRequestFor reports a stop request for this instance at the head of
// the VirtualMachine's state change requests
// (pkg/virt-controller/watch/vm/vm.go, hasStopRequestForVMI).
func hasStopRequestFor(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	r := vm.Status.StateChangeRequests
	return len(r) > 0 && r[0].Action == kubevirtv1.StopRequest && r[0].UID != nil && *r[0].UID == vmi.UID
}

// syncStateChangeRequests updates the state change requests as
// virt-controller does around a sync: deleting a Failed instance under
// RerunOnFailure adds a start request (syncRunStrategy, addStartRequest);
// then the head request is dropped once done (updateStatus,
// isTrimFirstChangeRequestNeeded): a stop request when there is no instance
// or another one, a start request when an instance lives.
func syncStateChangeRequests(st *kubevirtv1.VirtualMachineStatus, strategy kubevirtv1.VirtualMachineRunStrategy, v vmView, action vmAction) {
	if action == actDelete && strategy == kubevirtv1.RunStrategyRerunOnFailure && v.vmi.Status.Phase == kubevirtv1.Failed {
		st.StateChangeRequests = append(st.StateChangeRequests, kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StartRequest})
	}
	if len(st.StateChangeRequests) == 0 {
		return
	}
	head := st.StateChangeRequests[0]
	vmi := v.vmi
	trim := false
	switch head.Action {
	case kubevirtv1.StopRequest:
		trim = vmi == nil || head.UID == nil || *head.UID != vmi.UID
	case kubevirtv1.StartRequest:
		trim = vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	}
	if trim {
		st.StateChangeRequests = st.StateChangeRequests[1:]
		if len(st.StateChangeRequests) == 0 {
			st.StateChangeRequests = nil
		}
	}
}

// restartsOnFailure reports the run strategies that start an instance when
// there is none and track start failures.
func restartsOnFailure(s kubevirtv1.VirtualMachineRunStrategy) bool {
	return s == kubevirtv1.RunStrategyAlways || s == kubevirtv1.RunStrategyRerunOnFailure ||
		s == kubevirtv1.RunStrategyOnce
}

func backoffLeft(f *kubevirtv1.VirtualMachineStartFailure, now time.Time) time.Duration {
	if f == nil || f.RetryAfterTimestamp == nil {
		return 0
	}
	return max(f.RetryAfterTimestamp.Sub(now), 0)
}

// computeVMStatus derives the VirtualMachine status virt-controller would
// write once it took action on the instance it observed (v.vmi): like
// updateStatus in pkg/virt-controller/watch/vm/vm.go, it is computed from
// the instance seen before the action. startExpected is true when the
// instance was just created (or its creation refused).
func computeVMStatus(v vmView, action vmAction, startExpected bool) kubevirtv1.VirtualMachineStatus {
	st := *v.vm.Status.DeepCopy()
	strategy, _ := v.vm.RunStrategy()
	st.Created = v.vmi != nil
	st.Ready = v.vmi != nil && vmiConditionStatus(v.vmi, kubevirtv1.VirtualMachineInstanceReady) == corev1.ConditionTrue
	if st.RunStrategy != "" || st.Created {
		st.RunStrategy = strategy
	}
	if v.vmi != nil {
		st.DesiredGeneration = v.vm.Generation
		if g, ok := v.vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation]; ok {
			st.ObservedGeneration = parseGeneration(g)
		}
	}
	syncStateChangeRequests(&st, strategy, v, action)
	syncStartFailure(&st, strategy, v)
	syncVMConditions(&st, v.vmi, v.now)
	syncFailureCondition(&st, v.refusal, v.now)
	st.PrintableStatus = printableStatus(v, &st, strategy, startExpected, action == actDelete)
	return st
}

// syncStartFailure counts instances that failed before ever running and
// schedules the next attempt, as virt-controller's crash-loop backoff does.
func syncStartFailure(st *kubevirtv1.VirtualMachineStatus, strategy kubevirtv1.VirtualMachineRunStrategy, v vmView) {
	if wasRunning(v.vmi) || !restartsOnFailure(strategy) {
		st.StartFailure = nil
		return
	}
	if v.vmi == nil || !v.vmi.IsFinal() {
		return
	}
	if st.StartFailure != nil && st.StartFailure.LastFailedVMIUID == v.vmi.UID {
		return
	}
	count := 1
	if st.StartFailure != nil {
		count = st.StartFailure.ConsecutiveFailCount + 1
	}
	delay := crashLoopDelay(v.backoff, count, v.jitter)
	// The API keeps whole seconds; rounding up keeps the full delay.
	at := v.now.Add(delay)
	if whole := at.Truncate(time.Second); whole.Before(at) {
		at = whole.Add(time.Second)
	}
	retry := metav1.NewTime(at)
	st.StartFailure = &kubevirtv1.VirtualMachineStartFailure{
		ConsecutiveFailCount: count,
		LastFailedVMIUID:     v.vmi.UID,
		RetryAfterTimestamp:  &retry,
	}
}

// wasRunning reports whether the instance ever reached phase Running.
func wasRunning(vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			return true
		}
	}
	return false
}

// printableStatus applies virt-controller's ordered checks
// (pkg/virt-controller/watch/vm/vm.go, setPrintableStatus): the first that
// holds wins.
// stopExpected is true when the instance was just deleted
// (isVirtualMachineStatusStopping, isVMIStopExpected).
func printableStatus(v vmView, st *kubevirtv1.VirtualMachineStatus, strategy kubevirtv1.VirtualMachineRunStrategy,
	startExpected, stopExpected bool) kubevirtv1.VirtualMachinePrintableStatus {
	vmi := v.vmi
	gone := vmi == nil || vmi.IsFinal()
	switch {
	case v.vm.DeletionTimestamp != nil:
		return kubevirtv1.VirtualMachineStatusTerminating
	case !gone && (vmi.DeletionTimestamp != nil || strategy == kubevirtv1.RunStrategyHalted || stopExpected):
		return kubevirtv1.VirtualMachineStatusStopping
	case vmi != nil && vmiMigrating(vmi):
		return kubevirtv1.VirtualMachineStatusMigrating
	case vmi != nil && vmi.IsRunning() && vmiConditionStatus(vmi, kubevirtv1.VirtualMachineInstancePaused) == corev1.ConditionTrue:
		return kubevirtv1.VirtualMachineStatusPaused
	case vmi != nil && vmi.IsRunning():
		return kubevirtv1.VirtualMachineStatusRunning
	case v.dvs.failure != "":
		return kubevirtv1.VirtualMachineStatusDataVolumeError
	case vmi != nil && vmiUnschedulable(vmi):
		return kubevirtv1.VirtualMachineStatusUnschedulable
	case v.dvs.provisioning:
		return kubevirtv1.VirtualMachineStatusProvisioning
	case vmi != nil && vmiSyncFailure(vmi) == reasonErrImagePull:
		return kubevirtv1.VirtualMachineStatusErrImagePull
	case vmi != nil && vmiSyncFailure(vmi) == reasonImagePullBackOff:
		return kubevirtv1.VirtualMachineStatusImagePullBackOff
	case vmi == nil && startExpected, vmi != nil && !gone:
		return kubevirtv1.VirtualMachineStatusStarting
	case !startExpected && restartsOnFailure(strategy) && st.StartFailure != nil && st.StartFailure.ConsecutiveFailCount > 0:
		return kubevirtv1.VirtualMachineStatusCrashLoopBackOff
	default:
		return kubevirtv1.VirtualMachineStatusStopped
	}
}

// vmiUnschedulable reports a PodScheduled=False condition with reason
// Unschedulable, copied by virt-controller from the launcher pod.
func vmiUnschedulable(vmi *kubevirtv1.VirtualMachineInstance) bool {
	c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
}

// vmiMigrating reports a migration started and not ended
// (pkg/util/migrations/migrations.go, IsMigrating).
func vmiMigrating(vmi *kubevirtv1.VirtualMachineInstance) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.StartTimestamp != nil && ms.EndTimestamp == nil
}

// vmiSyncFailure is the reason of a Synchronized=False condition, or "".
func vmiSyncFailure(vmi *kubevirtv1.VirtualMachineInstance) string {
	if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c != nil && c.Status == corev1.ConditionFalse {
		return c.Reason
	}
	return ""
}
