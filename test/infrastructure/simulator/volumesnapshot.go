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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The CSI external-snapshotter (kubernetes-csi/external-snapshotter): its
// snapshot controller makes a VolumeSnapshotContent for each dynamically
// provisioned VolumeSnapshot and copies the content's status onto the
// snapshot (pkg/common-controller/snapshot_controller.go); its
// csi-snapshotter sidecar has the CSI driver cut the snapshot and writes
// the content's status (pkg/sidecar-controller). The simulator is the
// driver of every provisioner: a snapshot takes SnapshotDelay to cut and
// is ready at once, restoreSize the claim's capacity, and holds what the
// claim held then (volumecontent.go). Not imitated: pre-provisioned
// snapshots (spec.source.volumeSnapshotContentName), the finalizers the
// controller adds to snapshots, contents and source claims, and a class
// whose driver is not the claim's (no driver would cut that snapshot).

// snapshotReady reports a VolumeSnapshot whose status says readyToUse.
func snapshotReady(snap *snapshotv1.VolumeSnapshot) bool {
	return snap.Status != nil && snap.Status.ReadyToUse != nil && *snap.Status.ReadyToUse
}

// snapshotReconciler plays the snapshot controller and the CSI driver for
// VolumeSnapshots of PVCs.
type snapshotReconciler struct {
	sim      *Simulator
	recorder events.EventRecorder
}

func (r *snapshotReconciler) setup(mgr ctrl.Manager) error {
	r.recorder = mgr.GetEventRecorder("snapshot-controller")
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-volumesnapshot").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&snapshotv1.VolumeSnapshot{}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up VolumeSnapshot simulator: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("sim-volumesnapshotcontent").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&snapshotv1.VolumeSnapshotContent{}).
		// A deleted snapshot's content is collected.
		Watches(&snapshotv1.VolumeSnapshot{}, handler.EnqueueRequestsFromMapFunc(contentOfSnapshot)).
		Complete(&contentReconciler{sim: r.sim})
	if err != nil {
		return fmt.Errorf("setting up VolumeSnapshotContent simulator: %w", err)
	}
	return nil
}

// contentName is the name the snapshot controller gives the content of a
// dynamically provisioned snapshot (pkg/utils/util.go,
// GetDynamicSnapshotContentNameForSnapshot).
func contentName(snap *snapshotv1.VolumeSnapshot) string {
	return "snapcontent-" + string(snap.UID)
}

func contentOfSnapshot(_ context.Context, obj client.Object) []reconcile.Request {
	snap, ok := obj.(*snapshotv1.VolumeSnapshot)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: contentName(snap)}}}
}

// Reconcile takes one snapshot one step: a content for it, then, once the
// driver has cut it, its status.
func (r *snapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := pacerKey("VolumeSnapshot", req.NamespacedName)
	snap := &snapshotv1.VolumeSnapshot{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, snap); err != nil {
		if apierrors.IsNotFound(err) {
			r.sim.pacer.forget(key)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if snap.DeletionTimestamp != nil || snap.Spec.Source.PersistentVolumeClaimName == nil ||
		(snapshotReady(snap) && snap.Status.BoundVolumeSnapshotContentName != nil) {
		r.sim.pacer.forget(key)
		return ctrl.Result{}, nil
	}
	content, err := r.sim.snapshotContentOf(ctx, snap)
	if err != nil {
		return ctrl.Result{}, err
	}
	if content == nil {
		return r.createContent(ctx, snap)
	}
	if content.Status == nil || content.Status.ReadyToUse == nil || !*content.Status.ReadyToUse {
		if wait := r.sim.pacer.wait(key, snap.UID, "cutting", r.sim.opts.SnapshotDelay); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if err := r.cut(ctx, snap, content); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, r.updateStatus(ctx, snap, content)
}

// createContent resolves the snapshot's class (its own, or the default
// class of its claim's driver, which the controller writes into the
// snapshot's spec) and creates its content, or sets the error the
// controller sets (snapshot_controller_base.go, checkAndUpdateSnapshotClass;
// snapshot_controller.go, SetDefaultSnapshotClass, createSnapshotContent,
// getCreateSnapshotInput, getVolumeFromVolumeSnapshot).
func (r *snapshotReconciler) createContent(ctx context.Context, snap *snapshotv1.VolumeSnapshot) (ctrl.Result, error) {
	again := ctrl.Result{RequeueAfter: r.sim.opts.StepInterval}
	pvc, missing, claimErr := r.claimOf(ctx, snap)
	var class *snapshotv1.VolumeSnapshotClass
	if name := snap.Spec.VolumeSnapshotClassName; name != nil {
		class = &snapshotv1.VolumeSnapshotClass{}
		if err := r.sim.client.Get(ctx, types.NamespacedName{Name: *name}, class); err != nil {
			if !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
			msg := fmt.Sprintf("Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io %q not found", *name)
			return again, r.failed(ctx, snap, false, "GetSnapshotClassFailed", msg)
		}
	} else {
		var err error
		if class, err = r.defaultClass(ctx, snap, pvc, claimErr); err != nil {
			msg := fmt.Sprintf("Failed to set default snapshot class with error %v", err)
			return again, r.failed(ctx, snap, false, "SetDefaultSnapshotClassFailed", msg)
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"volumeSnapshotClassName": class.Name}})
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.sim.client.Patch(ctx, snap, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting the class of VolumeSnapshot %s/%s: %w", snap.Namespace, snap.Name, err)
		}
	}
	switch {
	case missing:
		// ensurePVCFinalizer fails first.
		msg := fmt.Sprintf("Failed to create snapshot content with error snapshot controller failed to update %s on API server: cannot get claim from snapshot",
			snap.Name)
		return again, r.failed(ctx, snap, true, "SnapshotContentCreationFailed", msg)
	case claimErr != nil:
		msg := fmt.Sprintf("Failed to create snapshot content with error failed to get input parameters to create snapshot %s: %q",
			snap.Name, claimErr.Error())
		return again, r.failed(ctx, snap, true, "SnapshotContentCreationFailed", msg)
	}
	content := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: contentName(snap)},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{
				Kind: "VolumeSnapshot", APIVersion: snapshotv1.SchemeGroupVersion.String(),
				Namespace: snap.Namespace, Name: snap.Name, UID: snap.UID, ResourceVersion: snap.ResourceVersion,
			},
			DeletionPolicy:          class.DeletionPolicy,
			Driver:                  class.Driver,
			VolumeSnapshotClassName: ptr.To(class.Name),
			Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("pvc-" + string(pvc.UID))},
			SourceVolumeMode:        ptr.To(volumeModeOf(pvc.Spec.VolumeMode)),
		},
	}
	if err := r.sim.client.Create(ctx, content); err != nil && !apierrors.IsAlreadyExists(err) {
		msg := fmt.Sprintf("Error creating volume snapshot content object for snapshot %s/%s: %v.", snap.Namespace, snap.Name, err)
		r.event(snap, corev1.EventTypeWarning, "CreateSnapshotContentFailed", msg)
		return ctrl.Result{}, err
	}
	r.event(snap, corev1.EventTypeNormal, "CreatingSnapshot",
		fmt.Sprintf("Waiting for a snapshot %s/%s to be created by the CSI driver.", snap.Namespace, snap.Name))
	// Come back for the cut: the content's watch event may reach a cache
	// that does not hold the content yet (this function then runs again,
	// finds it AlreadyExists and writes the same status), after which no
	// further event comes.
	return again, r.updateStatus(ctx, snap, content)
}

// claimOf returns the snapshot's bound source claim, or the controller's
// error for a missing (missing true) or unbound one
// (getClaimFromVolumeSnapshot, getVolumeFromVolumeSnapshot).
func (r *snapshotReconciler) claimOf(ctx context.Context, snap *snapshotv1.VolumeSnapshot) (pvc *corev1.PersistentVolumeClaim, missing bool, err error) {
	name := *snap.Spec.Source.PersistentVolumeClaimName
	pvc = &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: name}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, true, fmt.Errorf("failed to retrieve PVC %s from the lister: %q", name, fmt.Sprintf("persistentvolumeclaim %q not found", name))
		}
		return nil, false, err
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return nil, false, fmt.Errorf("the PVC %s is not yet bound to a PV, will not attempt to take a snapshot", name)
	}
	return pvc, false, nil
}

// defaultClass is the one class annotated default for the claim's driver.
func (r *snapshotReconciler) defaultClass(ctx context.Context, snap *snapshotv1.VolumeSnapshot,
	pvc *corev1.PersistentVolumeClaim, claimErr error) (*snapshotv1.VolumeSnapshotClass, error) {
	if claimErr != nil {
		return nil, claimErr
	}
	driver, err := r.sim.claimDriver(ctx, pvc)
	if err != nil {
		return nil, err
	}
	if driver == "" {
		return nil, fmt.Errorf("snapshotting non-CSI volumes is not supported, snapshot:%s/%s", snap.Namespace, snap.Name)
	}
	list := &snapshotv1.VolumeSnapshotClassList{}
	if err := r.sim.client.List(ctx, list); err != nil {
		return nil, err
	}
	var defaults []*snapshotv1.VolumeSnapshotClass
	for i := range list.Items {
		if c := &list.Items[i]; c.Driver == driver && c.Annotations[annDefaultSnapshotClass] == "true" {
			defaults = append(defaults, c)
		}
	}
	switch len(defaults) {
	case 0:
		return nil, errors.New("cannot find default snapshot class")
	case 1:
		return defaults[0], nil
	}
	return nil, fmt.Errorf("%d default snapshot classes were found", len(defaults))
}

// cut is the CSI driver taking the snapshot: the snapshot holds what the
// claim holds now, and the content's status reports it cut and ready
// (sidecar-controller/snapshot_controller.go, createSnapshotWrapper,
// updateSnapshotContentStatus).
func (r *snapshotReconciler) cut(ctx context.Context, snap *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) error {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: *snap.Spec.Source.PersistentVolumeClaimName}, pvc); err != nil {
		return fmt.Errorf("getting source PVC of VolumeSnapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	if err := r.sim.populateFrom(pvc.UID, snap.UID); err != nil {
		return fmt.Errorf("cutting VolumeSnapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	size := pvc.Status.Capacity[corev1.ResourceStorage]
	content.Status = &snapshotv1.VolumeSnapshotContentStatus{
		SnapshotHandle: ptr.To("snapshot-" + string(content.UID)),
		CreationTime:   ptr.To(time.Now().UnixNano()),
		RestoreSize:    ptr.To(size.Value()),
		ReadyToUse:     ptr.To(true),
	}
	if err := r.sim.client.Status().Update(ctx, content); err != nil {
		return fmt.Errorf("updating status of VolumeSnapshotContent %s: %w", content.Name, err)
	}
	return nil
}

// updateStatus copies the content's status onto the snapshot, with the
// events of its creation and readiness (updateSnapshotStatus).
func (r *snapshotReconciler) updateStatus(ctx context.Context, snap *snapshotv1.VolumeSnapshot, content *snapshotv1.VolumeSnapshotContent) error {
	st := &snapshotv1.VolumeSnapshotStatus{}
	if snap.Status != nil {
		st = snap.Status.DeepCopy()
	}
	wasCreated, wasReady := st.CreationTime != nil, st.ReadyToUse != nil && *st.ReadyToUse
	st.BoundVolumeSnapshotContentName = ptr.To(content.Name)
	ready := false
	if cs := content.Status; cs != nil {
		if cs.CreationTime != nil && st.CreationTime == nil {
			st.CreationTime = ptr.To(metav1.NewTime(time.Unix(0, *cs.CreationTime)))
		}
		if cs.RestoreSize != nil && (st.RestoreSize == nil || st.RestoreSize.IsZero()) {
			st.RestoreSize = resource.NewQuantity(*cs.RestoreSize, resource.BinarySI)
		}
		ready = cs.ReadyToUse != nil && *cs.ReadyToUse
	}
	st.ReadyToUse = ptr.To(ready)
	if ready {
		st.Error = nil
	}
	snap.Status = st
	if err := r.sim.client.Status().Update(ctx, snap); err != nil {
		return fmt.Errorf("updating status of VolumeSnapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	name := snap.Namespace + "/" + snap.Name
	if !wasCreated && st.CreationTime != nil {
		r.event(snap, corev1.EventTypeNormal, "SnapshotCreated", fmt.Sprintf("Snapshot %s was successfully created by the CSI driver.", name))
	}
	if !wasReady && ready {
		r.event(snap, corev1.EventTypeNormal, "SnapshotReady", fmt.Sprintf("Snapshot %s is ready to use.", name))
	}
	return nil
}

// failed sets the snapshot's error status and records the event, unless
// the same error is already set (updateSnapshotErrorStatusWithEvent).
func (r *snapshotReconciler) failed(ctx context.Context, snap *snapshotv1.VolumeSnapshot, notReady bool, reason, msg string) error {
	if snap.Status != nil && snap.Status.Error != nil && snap.Status.Error.Message != nil && *snap.Status.Error.Message == msg {
		return nil
	}
	st := &snapshotv1.VolumeSnapshotStatus{}
	if snap.Status != nil {
		st = snap.Status.DeepCopy()
	}
	st.Error = &snapshotv1.VolumeSnapshotError{Time: ptr.To(metav1.Now()), Message: ptr.To(msg)}
	if notReady {
		st.ReadyToUse = ptr.To(false)
	}
	snap.Status = st
	err := r.sim.client.Status().Update(ctx, snap)
	r.event(snap, corev1.EventTypeWarning, reason, msg)
	if err != nil {
		return fmt.Errorf("updating status of VolumeSnapshot %s/%s: %w", snap.Namespace, snap.Name, err)
	}
	return nil
}

func (r *snapshotReconciler) event(snap *snapshotv1.VolumeSnapshot, eventType, reason, msg string) {
	if r.recorder != nil {
		r.recorder.Eventf(snap, nil, eventType, reason, "Snapshot", "%s", msg)
	}
}

// contentReconciler plays the snapshot controller for contents: the
// content of a deleted snapshot goes with it under deletionPolicy Delete,
// and with it what the snapshot held; under Retain both stay
// (snapshot_controller.go, syncContent, processSnapshotWithDeletionTimestamp).
type contentReconciler struct {
	sim *Simulator
}

func (r *contentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	content := &snapshotv1.VolumeSnapshotContent{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, content); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ref := content.Spec.VolumeSnapshotRef
	if content.DeletionTimestamp != nil || ref.UID == "" {
		return ctrl.Result{}, nil
	}
	snap := &snapshotv1.VolumeSnapshot{}
	err := r.sim.reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, snap)
	switch {
	case err == nil && snap.UID == ref.UID:
		return ctrl.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	if content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete {
		return ctrl.Result{}, nil
	}
	if err := r.sim.client.Delete(ctx, content); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting VolumeSnapshotContent %s: %w", content.Name, err)
	}
	r.sim.volumes.remove(ref.UID)
	return ctrl.Result{}, nil
}
