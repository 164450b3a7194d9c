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

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// phaseEvent is the Normal event CDI records when a DataVolume enters
// phase: the import controller's (pkg/controller/datavolume/
// import-controller.go, updateStatusPhase) or the clone controllers'
// (clone-controller-base.go, setEventForPhase and updateStatusPhase). ""
// for a phase CDI records nothing for.
func phaseEvent(dv *cdiv1.DataVolume, phase cdiv1.DataVolumePhase, src *cloneSource) (reason, msg string) {
	if src == nil {
		switch phase {
		case cdiv1.ImportScheduled:
			return "ImportScheduled", fmt.Sprintf("Import into %s scheduled", dv.Name)
		case cdiv1.ImportInProgress:
			return "ImportInProgress", fmt.Sprintf("Import into %s in progress", dv.Name)
		case cdiv1.Succeeded:
			return "ImportSucceeded", fmt.Sprintf("Successfully imported into PVC %s", dv.Name)
		}
		return "", ""
	}
	ns, name := src.namespace, src.name
	switch phase {
	case cdiv1.CloneScheduled:
		return "CloneScheduled", fmt.Sprintf("Cloning from %s/%s into %s/%s scheduled", ns, name, dv.Namespace, dv.Name)
	case cdiv1.CloneInProgress:
		return "CloneInProgress", fmt.Sprintf("Cloning from %s/%s into %s/%s in progress", ns, name, dv.Namespace, dv.Name)
	case cdiv1.SnapshotForSmartCloneInProgress:
		return "SnapshotForSmartCloneInProgress", fmt.Sprintf("Creating snapshot for smart-clone is in progress (for pvc %s/%s)", ns, name)
	case cdiv1.CloneFromSnapshotSourceInProgress:
		return "CloneFromSnapshotSourceInProgress",
			fmt.Sprintf("Creating PVC from snapshot source is in progress (for %s %s/%s)", src.kind, ns, name)
	case cdiv1.CSICloneInProgress:
		return "CSICloneInProgress", fmt.Sprintf("CSI Volume clone in progress (for pvc %s/%s)", ns, name)
	case cdiv1.PrepClaimInProgress:
		return "PrepClaimInProgress", fmt.Sprintf("Prepping PersistentVolumeClaim for DataVolume %s/%s", dv.Namespace, dv.Name)
	case cdiv1.RebindInProgress:
		return "RebindInProgress", fmt.Sprintf("Rebinding PersistentVolumeClaim for DataVolume %s/%s", dv.Namespace, dv.Name)
	case cdiv1.Succeeded:
		return "CloneSucceeded", fmt.Sprintf("Successfully cloned from %s/%s into %s/%s", ns, name, dv.Namespace, dv.Name)
	}
	return "", ""
}

// recordEvents records what CDI does after a status write: the phase's
// event when the phase changed, and the Bound condition's reason and
// message when it changed (controller-base.go, emitEvent,
// emitBoundConditionEvent).
func (r *dataVolumeReconciler) recordEvents(dv *cdiv1.DataVolume, old cdiv1.DataVolumeStatus, src *cloneSource) {
	if r.recorder == nil {
		return
	}
	if old.Phase != dv.Status.Phase {
		if reason, msg := phaseEvent(dv, dv.Status.Phase, src); reason != "" {
			r.recorder.Eventf(dv, nil, corev1.EventTypeNormal, reason, "Sync", "%s", msg)
		}
	}
	cur, prev := findDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeBound), findDataVolumeCondition(old.Conditions, cdiv1.DataVolumeBound)
	if cur != nil && cur.Reason != "" && (prev == nil || cur.Status != prev.Status || cur.Reason != prev.Reason || cur.Message != prev.Message) {
		r.recorder.Eventf(dv, nil, corev1.EventTypeNormal, cur.Reason, "Sync", "%s", cur.Message)
	}
}

func findDataVolumeCondition(conds []cdiv1.DataVolumeCondition, t cdiv1.DataVolumeConditionType) *cdiv1.DataVolumeCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
