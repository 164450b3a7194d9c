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
	"encoding/json"
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
	// SidecarGateOff behaves as if KubeVirt's Sidecar feature gate were off
	// when the VirtualMachine's instance is created: virt-api refuses an
	// instance with a hooks.kubevirt.io/hookSidecars annotation, and the
	// VirtualMachine gets a Failure condition (reason FailedCreate) with
	// virt-api's words, retried until the fault is cleared.
	SidecarGateOff FaultKind = "SidecarGateOff"
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

// Kubelet and virt-api messages, in their words.
const (
	// defaultLauncherImage names the image an instance without hook sidecar
	// fails to pull.
	defaultLauncherImage = "quay.io/kubevirt/virt-launcher:v1.9.0"
	// sidecarGateRefusal is what virt-api's instance admitter answers
	// (pkg/virt-api/webhooks/validating-webhook/admitters/
	// vmi-create-admitter.go, ValidateVirtualMachineInstanceMetadata),
	// behind the name of the webhook that runs it.
	sidecarGateRefusal = `admission webhook "virtualmachineinstances-create-validator.kubevirt.io" denied the request: ` +
		"sidecar feature gate is not enabled in kubevirt-config, invalid entry metadata.annotations." + hookSidecarsAnnotation
	hookSidecarsAnnotation = "hooks.kubevirt.io/hookSidecars"
	// Reasons copied by virt-controller from the launcher pod's waiting
	// containers (pkg/controller/controller.go).
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
	// reasonFailedCreate is virt-controller's Failure reason for an instance
	// it could not create (pkg/virt-controller/watch/vm/vm.go).
	reasonFailedCreate = "FailedCreate"
	// reasonNodeUnresponsive is the instance's status.reason once
	// virt-controller's node controller failed it
	// (pkg/virt-controller/watch/node/node.go).
	reasonNodeUnresponsive = "NodeUnresponsive"
)

// instanceRefusal returns virt-api's refusal of the instance the
// VirtualMachine would create, or "" when virt-api admits it.
func (s *Simulator) instanceRefusal(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil || vm.Spec.Template.ObjectMeta.Annotations[hookSidecarsAnnotation] == "" ||
		!s.hasFault(SidecarGateOff, vm.Namespace, vm.Name) {
		return ""
	}
	return sidecarGateRefusal
}

// syncFailureCondition sets or removes the VirtualMachine's Failure
// condition, as processFailureCondition in pkg/virt-controller/watch/vm/
// vm.go does with the error of the last sync: an instance create refused by
// virt-api is wrapped as "Failure while starting VMI: ...".
func syncFailureCondition(st *kubevirtv1.VirtualMachineStatus, refusal string, now time.Time) {
	if refusal == "" {
		kept := st.Conditions[:0]
		for _, c := range st.Conditions {
			if c.Type != kubevirtv1.VirtualMachineFailure {
				kept = append(kept, c)
			}
		}
		st.Conditions = kept
		return
	}
	upsertVMCondition(st, kubevirtv1.VirtualMachineCondition{
		Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: reasonFailedCreate,
		Message:            "Failure while starting VMI: " + refusal,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// faultsOf reads the faults that affect the named instance.
func (s *Simulator) faultsOf(key types.NamespacedName) vmiFaults {
	has := func(k FaultKind) bool { return s.hasFault(k, key.Namespace, key.Name) }
	return vmiFaults{
		unschedulable: has(Unschedulable), crash: has(CrashLoop),
		imagePull: has(ImagePullFailed), paused: has(Paused), migrating: has(Migrating), nodeLost: has(NodeLost),
	}
}

// pacerState is the state the pacer times an instance in: its phase, and a
// failing image pull's stage, so that ErrImagePull lasts a step before it
// turns into ImagePullBackOff.
func pacerState(vmi *kubevirtv1.VirtualMachineInstance) string {
	if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c != nil {
		return string(vmi.Status.Phase) + "/" + c.Reason
	}
	return string(vmi.Status.Phase)
}

// stepImagePull plays the kubelet's failing pull of the launcher pod's
// image, copied onto the instance by virt-controller
// (pkg/virt-controller/watch/vmi/lifecycle.go, checkForContainerImageError,
// then the Synchronized condition of the sync error): ErrImagePull first,
// ImagePullBackOff from the next step on. It reports whether anything
// changed.
func stepImagePull(vmi *kubevirtv1.VirtualMachineInstance, now time.Time) bool {
	image := launcherImage(vmi)
	c := kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
		Reason: reasonErrImagePull,
		Message: fmt.Sprintf("rpc error: code = NotFound desc = failed to pull and unpack image %q: "+
			"failed to resolve reference %q: %s: not found", image, image, image),
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
	if old := vmiCondition(vmi, c.Type); old != nil && old.Status == corev1.ConditionFalse &&
		(old.Reason == reasonErrImagePull || old.Reason == reasonImagePullBackOff) {
		c.Reason, c.Message = reasonImagePullBackOff, fmt.Sprintf("Back-off pulling image %q", image)
	}
	return setVMICondition(vmi, c)
}

// clearImagePull drops a failed pull's Synchronized condition once the
// image could be pulled.
func clearImagePull(vmi *kubevirtv1.VirtualMachineInstance) {
	if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c != nil &&
		(c.Reason == reasonErrImagePull || c.Reason == reasonImagePullBackOff) {
		removeVMICondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized)
	}
}

// launcherImage is the image a failing pull names: the first hook sidecar's.
func launcherImage(vmi *kubevirtv1.VirtualMachineInstance) string {
	var sidecars []struct {
		Image string `json:"image"`
	}
	if err := json.Unmarshal([]byte(vmi.Annotations[hookSidecarsAnnotation]), &sidecars); err == nil &&
		len(sidecars) > 0 && sidecars[0].Image != "" {
		return sidecars[0].Image
	}
	return defaultLauncherImage
}

// stepRunning applies the faults of a Running instance and reports whether
// anything changed.
func stepRunning(vmi *kubevirtv1.VirtualMachineInstance, f vmiFaults, now time.Time) bool {
	if f.nodeLost {
		// pkg/virt-controller/watch/node/node.go,
		// createAndApplyFailedVMINodeUnresponsivePatch.
		setVMIPhase(vmi, kubevirtv1.Failed, now)
		vmi.Status.Reason = reasonNodeUnresponsive
		return true
	}
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
