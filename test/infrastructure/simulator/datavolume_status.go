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
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Condition reasons and messages CDI reports on DataVolumes.
const (
	reasonBound            = "Bound"
	reasonPending          = "Pending"
	reasonPodCreating      = "ContainerCreating"
	reasonPodRunning       = "Pod is running"
	reasonPopulatorRunning = "Populator is running"
	reasonTransferRunning  = "TransferRunning"
	reasonCompleted        = "Completed"
	reasonError            = "Error"

	// progressUnknown is CDI's progress before the transfer starts.
	progressUnknown cdiv1.DataVolumeProgress = "N/A"
	// progressComplete is CDI's progress once the transfer has succeeded.
	progressComplete cdiv1.DataVolumeProgress = "100.0%"
)

// isClone reports whether CDI would clone rather than import the
// DataVolume: its source is a PVC or a snapshot, or it names a DataSource
// (whose sources are PVCs or snapshots).
func isClone(dv *cdiv1.DataVolume) bool {
	if dv.Spec.SourceRef != nil {
		return true
	}
	src := dv.Spec.Source
	return src != nil && (src.PVC != nil || src.Snapshot != nil)
}

// nextDataVolumeStatus returns the DataVolume status one step on from the
// current one, and false when the step changes nothing (the DataVolume is
// done or held by a fault). It imitates CDI's DataVolume controllers
// (pkg/controller/datavolume/controller-base.go, syncDvPvcState and
// updateStatusPVCPending; import-controller.go and clone-controller-base.go,
// updateStatusPhase): a failed importer or clone pod is restarted
// (RestartPolicyOnFailure, pkg/controller/import-controller.go) and the
// DataVolume never enters Failed; the failure shows as Running=False with
// reason Error and a growing status.restartCount (pkg/controller/util.go,
// setAnnotationsFromPodWithPrefix).
func nextDataVolumeStatus(dv *cdiv1.DataVolume, steps int, f dvFaults) (cdiv1.DataVolumeStatus, bool) {
	st := *dv.Status.DeepCopy()
	clone := isClone(dv)
	scheduled, inProgress := cdiv1.ImportScheduled, cdiv1.ImportInProgress
	if clone {
		scheduled, inProgress = cdiv1.CloneScheduled, cdiv1.CloneInProgress
	}
	st.ClaimName = dv.Name
	switch {
	case dataVolumeDone(st.Phase):
		return st, false
	case f.quota && (st.Phase == cdiv1.PhaseUnset || st.Phase == cdiv1.Pending):
		// handlePvcCreation: the PVC create is refused, the DataVolume is
		// Pending with the refusal on Bound, and CDI retries.
		st.Phase, st.Progress = cdiv1.Pending, progressUnknown
		st.Conditions = quotaConditions(st.Conditions, dv.Name)
		return st, !equality.Semantic.DeepEqual(st, dv.Status)
	case st.Phase == cdiv1.PhaseUnset:
		st.Phase, st.Progress = cdiv1.Pending, progressUnknown
	case f.waitForConsumer && (st.Phase == cdiv1.Pending || st.Phase == cdiv1.PendingPopulation):
		// updateStatusPVCPending with populators: a WaitForFirstConsumer
		// PVC with no selected node and no immediate-binding request is
		// PendingPopulation until a pod that uses it is scheduled.
		st.Phase = cdiv1.PendingPopulation
	case st.Phase == cdiv1.Pending || st.Phase == cdiv1.PendingPopulation:
		st.Phase, st.Progress = scheduled, progressUnknown
	case st.Phase == scheduled && f.unschedulable:
		st.Conditions = setDataVolumeCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonUnschedulable, msgUnschedulable)
		return st, !equality.Semantic.DeepEqual(st, dv.Status)
	case (st.Phase == scheduled || st.Phase == inProgress) && f.failed:
		// The pod ran and exited with an error; the kubelet restarts it.
		// The pod stays Running, so the phase is InProgress.
		if st.Phase == scheduled {
			st.Progress = progressAt(0, steps)
		}
		st.Phase = inProgress
		st.RestartCount++
		st.Conditions = dataVolumeConditions(st.Conditions, dv.Name, st.Phase, clone)
		st.Conditions = setDataVolumeCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, reasonError, dataVolumeFailureMessage(dv))
		return st, true
	case clone && f.waitForSource && st.Phase == holdPhase(f.clone):
		// The clone waits for its source to be ready.
		return st, false
	case clone && st.Phase != inProgress && cloneStepsFrom(f.clone, st.Phase):
		// A clone passes through the phases of its plan; smart clones
		// report no progress until they are done, phases after a copy
		// keep its 100%.
		next := nextClonePhase(f.clone, st.Phase)
		switch {
		case next == inProgress:
			st.Progress = progressAt(0, steps)
		case next == cdiv1.Succeeded || st.Progress == progressComplete:
			st.Progress = progressComplete
		default:
			st.Progress = progressUnknown
		}
		st.Phase = next
	case st.Phase == scheduled:
		st.Phase, st.Progress = inProgress, progressAt(0, steps)
	case st.Phase == inProgress:
		if runningFalse(st.Conditions) {
			// The restarted pod runs again: the transfer resumes.
			break
		}
		next := progressIndex(st.Progress, steps) + 1
		switch {
		case next < steps:
			st.Progress = progressAt(next, steps)
		case clone:
			st.Phase, st.Progress = nextClonePhase(f.clone, st.Phase), progressComplete
		default:
			st.Phase, st.Progress = cdiv1.Succeeded, progressComplete
		}
	default:
		return st, false
	}
	st.Conditions = dataVolumeConditions(st.Conditions, dv.Name, st.Phase, clone)
	return st, !equality.Semantic.DeepEqual(st, dv.Status)
}

// runningFalse reports a Running=False condition left by a failed pod.
func runningFalse(conds []cdiv1.DataVolumeCondition) bool {
	for _, c := range conds {
		if c.Type == cdiv1.DataVolumeRunning {
			return c.Status == corev1.ConditionFalse && c.Reason == reasonError
		}
	}
	return false
}

// quotaConditions are the conditions of a DataVolume whose PVC the API
// server refused for a quota: with no PVC, CDI puts the event's reason and
// message on Bound and Ready (controller-base.go,
// updateDataVolumeStatusPhaseWithEvent; conditions.go, updateBoundCondition).
func quotaConditions(conds []cdiv1.DataVolumeCondition, claim string) []cdiv1.DataVolumeCondition {
	f := corev1.ConditionFalse
	conds = setDataVolumeCondition(conds, cdiv1.DataVolumeBound, f, reasonExceededQuota, quotaMessage(claim))
	conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, f, reasonExceededQuota, quotaMessage(claim))
	return setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, f, "", "")
}

// progressAt formats step i of steps the way CDI reports progress.
func progressAt(i, steps int) cdiv1.DataVolumeProgress {
	return cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", float64(i)*100/float64(steps)))
}

// progressIndex is the inverse of progressAt; unreadable progress counts as
// the first step.
func progressIndex(p cdiv1.DataVolumeProgress, steps int) int {
	f, err := strconv.ParseFloat(strings.TrimSuffix(string(p), "%"), 64)
	if err != nil {
		return 0
	}
	return int(math.Round(f * float64(steps) / 100))
}

// dataVolumeConditions sets the Bound, Running and Ready conditions CDI
// reports for phase.
func dataVolumeConditions(conds []cdiv1.DataVolumeCondition, claim string, phase cdiv1.DataVolumePhase, clone bool) []cdiv1.DataVolumeCondition {
	bound := func(c []cdiv1.DataVolumeCondition) []cdiv1.DataVolumeCondition {
		return setDataVolumeCondition(c, cdiv1.DataVolumeBound, corev1.ConditionTrue, reasonBound, fmt.Sprintf("PVC %s Bound", claim))
	}
	f, t := corev1.ConditionFalse, corev1.ConditionTrue
	switch phase {
	case cdiv1.Pending, cdiv1.PendingPopulation:
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeBound, f, reasonPending, fmt.Sprintf("PVC %s Pending", claim))
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, f, "", "")
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, f, "", "")
	case cdiv1.ImportScheduled, cdiv1.CloneScheduled:
		conds = bound(conds)
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, f, reasonPodCreating, "")
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, f, "", "")
	case cdiv1.ImportInProgress, cdiv1.CloneInProgress:
		conds = bound(conds)
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, t, reasonPodRunning, "")
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, f, reasonTransferRunning, "")
	case cdiv1.SnapshotForSmartCloneInProgress, cdiv1.CloneFromSnapshotSourceInProgress, cdiv1.CSICloneInProgress,
		cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress:
		// The clone populator's running annotations
		// (pkg/controller/populators/clone-populator.go, addRunningAnnotations).
		conds = bound(conds)
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, t, reasonPopulatorRunning, "")
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, f, reasonTransferRunning, "")
	case cdiv1.Succeeded:
		msg := "Import Complete"
		if clone {
			msg = "Clone Complete"
		}
		conds = bound(conds)
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeRunning, f, reasonCompleted, msg)
		conds = setDataVolumeCondition(conds, cdiv1.DataVolumeReady, t, "", "")
	}
	return conds
}

// dataVolumeFailureMessage is the Running condition message of a DataVolume
// whose pod the DataVolumeFailed fault makes fail: for an HTTP import the
// importer's words for a missing image (pkg/importer/http-datasource.go).
func dataVolumeFailureMessage(dv *cdiv1.DataVolume) string {
	if src := dv.Spec.Source; src != nil && src.HTTP != nil {
		return fmt.Sprintf("Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found (simulated fault %s)", DataVolumeFailed)
	}
	op := "import"
	if isClone(dv) {
		op = "clone"
	}
	return fmt.Sprintf("Unable to process data: %s failed (simulated fault %s)", op, DataVolumeFailed)
}

// setDataVolumeCondition updates or appends a condition like CDI does: the
// transition time moves only when the status changes, the heartbeat whenever
// anything changes.
func setDataVolumeCondition(conds []cdiv1.DataVolumeCondition, t cdiv1.DataVolumeConditionType,
	status corev1.ConditionStatus, reason, message string) []cdiv1.DataVolumeCondition {
	now := metav1.Now()
	for i := range conds {
		c := &conds[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		if c.Status != status || c.Reason != reason || c.Message != message {
			c.LastHeartbeatTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return conds
	}
	return append(conds, cdiv1.DataVolumeCondition{
		Type: t, Status: status, Reason: reason, Message: message,
		LastTransitionTime: now, LastHeartbeatTime: now,
	})
}

// cloneSequence is the phases a clone walks from CloneScheduled to
// Succeeded under its plan (clonePlan.phases).
func cloneSequence(plan clonePlan) []cdiv1.DataVolumePhase {
	before, copies, after := plan.phases()
	seq := append([]cdiv1.DataVolumePhase{cdiv1.CloneScheduled}, before...)
	if copies {
		seq = append(seq, cdiv1.CloneInProgress)
	}
	seq = append(seq, after...)
	return append(seq, cdiv1.Succeeded)
}

// cloneStepsFrom reports whether the plan moves a clone on from phase by
// itself (not through progress steps).
func cloneStepsFrom(plan clonePlan, phase cdiv1.DataVolumePhase) bool {
	seq := cloneSequence(plan)
	i := slices.Index(seq, phase)
	// From CloneScheduled straight to a copy, the import's step applies.
	return i >= 0 && i < len(seq)-1 && (i > 0 || seq[1] != cdiv1.CloneInProgress)
}

// nextClonePhase is the phase after current in the plan's sequence.
func nextClonePhase(plan clonePlan, current cdiv1.DataVolumePhase) cdiv1.DataVolumePhase {
	seq := cloneSequence(plan)
	if i := slices.Index(seq, current); i >= 0 && i+1 < len(seq) {
		return seq[i+1]
	}
	return cdiv1.Succeeded
}

// holdPhase is the phase a clone waits in while its source is not ready:
// a restore in CloneFromSnapshotSourceInProgress, where the CSI
// provisioner waits for the snapshot (CloneScheduled when the plan
// restores nothing itself); a clone from a PVC in CloneScheduled, before it
// snapshots, clones or copies the PVC.
func holdPhase(plan clonePlan) cdiv1.DataVolumePhase {
	if plan.fromSnapshot && slices.Contains(cloneSequence(plan), cdiv1.CloneFromSnapshotSourceInProgress) {
		return cdiv1.CloneFromSnapshotSourceInProgress
	}
	return cdiv1.CloneScheduled
}
