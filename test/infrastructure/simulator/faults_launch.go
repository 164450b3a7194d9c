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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Faults of a VirtualMachine's launch and run. Name is the VirtualMachine's.
const (
	// ImagePullFailed makes the kubelet fail to pull an image of the
	// instance's launcher pod (the first hook sidecar's image, when there is
	// one). The instance stays in phase Scheduling with a Synchronized=False
	// condition, reason ErrImagePull and then ImagePullBackOff, carrying the
	// kubelet's message; the VirtualMachine reports the same printableStatus.
	// Clearing the fault lets the pull succeed and the start go on.
	ImagePullFailed FaultKind = "ImagePullFailed"
	// Paused pauses a Running instance, as virtctl pause does: condition
	// Paused=True (reason PausedByUser); the VirtualMachine reports Paused.
	// Clearing the fault unpauses it.
	Paused FaultKind = "Paused"
	// Migrating starts a live migration of a Running instance, which lasts
	// until the fault is cleared; the VirtualMachine reports Migrating.
	Migrating FaultKind = "Migrating"
	// NodeLost loses the node of a Running instance: its virt-launcher pod
	// is gone, virt-controller marks the instance Failed (status.reason
	// NodeUnresponsive), and the run strategy decides what follows. The
	// fault clears itself once applied: the restarted instance lands on a
	// healthy node.
	NodeLost FaultKind = "NodeLost"
)

// The kubelet's reasons for a container whose image cannot be pulled,
// which virt-controller copies onto the instance (pkg/controller/controller.go).
const (
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
)

// faultsOf reads the faults that affect the named instance.
func (s *Simulator) faultsOf(key types.NamespacedName) vmiFaults {
	has := func(k FaultKind) bool { return s.hasFault(k, key.Namespace, key.Name) }
	return vmiFaults{
		unschedulable: has(Unschedulable), crash: has(CrashLoop),
		imagePull: has(ImagePullFailed), paused: has(Paused), migrating: has(Migrating), nodeLost: has(NodeLost),
	}
}

// stepRunning applies the faults of a Running instance and reports whether
// anything changed.
func stepRunning(vmi *kubevirtv1.VirtualMachineInstance, f vmiFaults, now time.Time) bool {
	return syncPaused(vmi, f.paused, now) || syncMigration(vmi, f.migrating, now)
}

// syncPaused sets or removes the Paused condition virt-handler keeps on a
// paused instance (pkg/virt-handler/vm.go).
func syncPaused(vmi *kubevirtv1.VirtualMachineInstance, paused bool, now time.Time) bool {
	if !paused {
		return removeVMICondition(vmi, kubevirtv1.VirtualMachineInstancePaused)
	}
	return setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue,
		Reason: "PausedByUser", Message: "VMI was paused by user",
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	})
}

// syncMigration starts a migration, or ends the one in progress, in
// status.migrationState: KubeVirt counts an instance as migrating from the
// state's start timestamp until its end timestamp
// (pkg/util/migrations/migrations.go, IsMigrating). Only the source node's
// part is played: virt-api's node restriction refuses a virt-handler that
// names a target node, which is virt-controller's to choose.
func syncMigration(vmi *kubevirtv1.VirtualMachineInstance, migrating bool, now time.Time) bool {
	ms := vmi.Status.MigrationState
	inProgress := ms != nil && ms.StartTimestamp != nil && ms.EndTimestamp == nil
	t := metav1.NewTime(now)
	switch {
	case migrating && !inProgress:
		vmi.Status.MigrationState = &kubevirtv1.VirtualMachineInstanceMigrationState{
			StartTimestamp: &t, SourceNode: vmi.Status.NodeName,
			MigrationUID: types.UID(fmt.Sprintf("%s-migration-%d", vmi.UID, now.UnixNano())),
		}
	case !migrating && inProgress:
		ms.EndTimestamp, ms.Completed = &t, true
	default:
		return false
	}
	return true
}
