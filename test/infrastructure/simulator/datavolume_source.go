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
	"fmt"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// AnnImmediateBinding is CDI's DataVolume (and PVC) annotation asking it to
// populate a DataVolume on a WaitForFirstConsumer storage class without
// waiting for a consumer; only its presence counts
// (pkg/controller/common/util.go, AnnImmediateBinding and
// ImmediateBindingRequested).
const AnnImmediateBinding = "cdi.kubevirt.io/storage.bind.immediate.requested"

// cloneSource is a clone's source as CDI resolves it: a PVC or a
// VolumeSnapshot, from spec.source or from the DataSource spec.sourceRef
// names, with the object when it exists.
type cloneSource struct {
	// kind is "pvc" or "snapshot", as CDI's messages name the source.
	kind            string
	namespace, name string
	// pvc is the source PVC, nil when it does not exist (or the source is
	// a snapshot).
	pvc *corev1.PersistentVolumeClaim
	// snapshot is the source VolumeSnapshot, nil when it does not exist
	// (or the source is a PVC).
	snapshot *snapshotv1.VolumeSnapshot
}

// cloneSourceOf resolves and reads a clone's source: spec.source.pvc or
// .snapshot, or those of the DataSource in spec.sourceRef. resolved is
// false when CDI finds no clone source to act on: the DataSource is
// missing or has neither a PVC nor a snapshot source
// (pkg/controller/datavolume/controller-base.go, getSourceRefOp, returns
// dataVolumeNop and no controller touches the DataVolume). A nil source
// with resolved true is an import.
func (r *dataVolumeReconciler) cloneSourceOf(ctx context.Context, dv *cdiv1.DataVolume) (*cloneSource, bool, error) {
	ns, src := dv.Namespace, dv.Spec.Source
	if ref := dv.Spec.SourceRef; ref != nil {
		if ref.Kind != cdiv1.DataVolumeDataSource {
			return nil, false, nil
		}
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = *ref.Namespace
		}
		ds := &cdiv1.DataSource{}
		if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, ds); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("getting DataSource %s/%s: %w", ns, ref.Name, err)
		}
		if ds.Spec.Source.PVC == nil && ds.Spec.Source.Snapshot == nil {
			return nil, false, nil
		}
		src = &cdiv1.DataVolumeSource{PVC: ds.Spec.Source.PVC, Snapshot: ds.Spec.Source.Snapshot}
	}
	var cs *cloneSource
	switch {
	case src != nil && src.PVC != nil:
		cs = &cloneSource{kind: "pvc", namespace: src.PVC.Namespace, name: src.PVC.Name}
	case src != nil && src.Snapshot != nil:
		cs = &cloneSource{kind: "snapshot", namespace: src.Snapshot.Namespace, name: src.Snapshot.Name}
	default:
		return nil, true, nil
	}
	if cs.namespace == "" {
		cs.namespace = ns
	}
	key := types.NamespacedName{Namespace: cs.namespace, Name: cs.name}
	var obj client.Object = &corev1.PersistentVolumeClaim{}
	if cs.kind == "snapshot" {
		obj = &snapshotv1.VolumeSnapshot{}
	}
	if err := r.sim.client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return cs, true, nil
		}
		return nil, true, fmt.Errorf("getting source %s %s: %w", cs.kind, key, err)
	}
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		cs.pvc = o
	case *snapshotv1.VolumeSnapshot:
		cs.snapshot = o
	}
	return cs, true, nil
}

// holdForSource reports whether a clone cannot start for want of a valid
// source, before CDI creates the target PVC. A DataVolume whose
// DataSource does not resolve gets no status at all (resolved false); one
// whose source is missing keeps its phase and gets Bound and Ready False
// with reason CloneWithoutSource, one whose source fails CDI's checks the
// same with reason CloneValidationFailed, and a Warning event of that
// reason (pkg/controller/datavolume/pvc-clone-controller.go,
// validateCloneAndSourcePVC, validateClone; snapshot-clone-controller.go,
// validateCloneAndSourceSnapshot, validateSnapshotClone).
func (r *dataVolumeReconciler) holdForSource(ctx context.Context, dv *cdiv1.DataVolume, src *cloneSource) (bool, error) {
	if src == nil {
		return false, nil
	}
	var reason, msg string
	switch {
	case src.kind == "pvc" && src.pvc == nil, src.kind == "snapshot" && src.snapshot == nil:
		reason, msg = reasonCloneNoSource, fmt.Sprintf(msgCloneNoSource, src.kind, src.name)
	case src.pvc != nil:
		if err := validatePVCClone(src.pvc, &dv.Spec); err != nil {
			reason, msg = reasonCloneInvalid, fmt.Sprintf(msgCloneInvalid, err)
		}
	case src.snapshot != nil:
		if err := validateSnapshotClone(src.snapshot, &dv.Spec); err != nil {
			reason, msg = reasonCloneInvalid, fmt.Sprintf(msgCloneInvalid, err)
		}
	}
	if reason == "" {
		return false, nil
	}
	st := dv.Status.DeepCopy()
	f := corev1.ConditionFalse
	st.Conditions = setDataVolumeCondition(st.Conditions, cdiv1.DataVolumeBound, f, reason, msg)
	st.Conditions = setDataVolumeCondition(st.Conditions, cdiv1.DataVolumeReady, f, reason, msg)
	st.Conditions = setDataVolumeCondition(st.Conditions, cdiv1.DataVolumeRunning, f, "", "")
	if equality.Semantic.DeepEqual(*st, dv.Status) {
		return true, nil
	}
	dv.Status = *st
	if err := r.sim.client.Status().Update(ctx, dv); err != nil {
		return true, fmt.Errorf("updating status of DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	if r.recorder != nil {
		r.recorder.Eventf(dv, nil, corev1.EventTypeWarning, reason, "Clone", "%s", msg)
	}
	return true, nil
}

// waitsForConsumer reports whether the DataVolume's storage class binds on
// first consumer and no node was selected for its PVC yet, so CDI leaves it
// PendingPopulation (pkg/controller/datavolume/controller-base.go,
// shouldBeMarkedPendingPopulation: WaitForFirstConsumer, no selected node,
// no AnnImmediateBinding). kube-scheduler selects the node when it places a
// pod that uses the PVC (the kubelet stand-in's bindVolumes), here the
// launcher pod virt-controller creates for a VM that starts.
func (r *dataVolumeReconciler) waitsForConsumer(ctx context.Context, dv *cdiv1.DataVolume) (bool, error) {
	switch dv.Status.Phase {
	case cdiv1.PhaseUnset, cdiv1.Pending, cdiv1.PendingPopulation:
	default:
		return false, nil
	}
	if _, ok := dv.Annotations[AnnImmediateBinding]; ok {
		return false, nil
	}
	sc, err := r.storageClassOf(ctx, dv)
	if err != nil || sc == nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return false, err
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: dv.Namespace, Name: dv.Name}, pvc); err != nil {
		return true, client.IgnoreNotFound(err)
	}
	return pvc.Annotations[annSelectedNode] == "", nil
}

// storageClassOf returns the DataVolume's storage class: the one it names,
// else the default CDI renders its PVC with (storageClassNamed); nil when
// there is none.
func (r *dataVolumeReconciler) storageClassOf(ctx context.Context, dv *cdiv1.DataVolume) (*storagev1.StorageClass, error) {
	switch {
	case dv.Spec.Storage != nil:
		return r.sim.storageClassNamed(ctx, dv.Spec.Storage.StorageClassName, true)
	case dv.Spec.PVC != nil:
		return r.sim.storageClassNamed(ctx, dv.Spec.PVC.StorageClassName, false)
	}
	return nil, nil
}

// dataSourceReconciler plays CDI's DataSource controller
// (pkg/controller/datasource-controller.go, update, handlePvcSource and
// handleSnapshotSource): Ready=True once the source PVC exists (and the
// DataVolume importing it, if any, Succeeded) or the source VolumeSnapshot
// is readyToUse, Ready=False otherwise with CDI's reason.
type dataSourceReconciler struct {
	sim *Simulator
}

func (r *dataSourceReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-datasource").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&cdiv1.DataSource{}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up DataSource simulator: %w", err)
	}
	return nil
}

// Reconcile sets the DataSource's Ready condition. CDI watches the source
// PVCs and DataVolumes; the simulator looks again every StepInterval while
// the DataSource is not Ready.
func (r *dataSourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ds := &cdiv1.DataSource{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, ds); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	status, reason, msg, err := r.readiness(ctx, ds)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := ds.Status.DeepCopy()
	ds.Spec.Source.DeepCopyInto(&st.Source)
	st.Conditions = setDataSourceReady(st.Conditions, status, reason, msg)
	if !equality.Semantic.DeepEqual(*st, ds.Status) {
		ds.Status = *st
		// The DataSource CRD has no status subresource: CDI updates the
		// whole object.
		if err := r.sim.client.Update(ctx, ds); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating status of DataSource %s: %w", req.NamespacedName, err)
		}
	}
	if status != corev1.ConditionTrue {
		return ctrl.Result{RequeueAfter: r.sim.opts.StepInterval}, nil
	}
	return ctrl.Result{}, nil
}

// readiness is the DataSource's Ready condition in CDI's words
// (handlePvcSource, handleSnapshotSource).
func (r *dataSourceReconciler) readiness(ctx context.Context, ds *cdiv1.DataSource) (corev1.ConditionStatus, string, string, error) {
	src := ds.Spec.Source
	switch {
	case src.PVC != nil:
		ns := src.PVC.Namespace
		if ns == "" {
			ns = ds.Namespace
		}
		key := types.NamespacedName{Namespace: ns, Name: src.PVC.Name}
		dv := &cdiv1.DataVolume{}
		if err := r.sim.client.Get(ctx, key, dv); err == nil {
			if dv.Status.Phase == cdiv1.Succeeded {
				return corev1.ConditionTrue, "Ready", "DataSource is ready to be consumed", nil
			}
			return corev1.ConditionFalse, string(dv.Status.Phase), fmt.Sprintf("Import DataVolume phase %s", dv.Status.Phase), nil
		} else if !apierrors.IsNotFound(err) {
			return "", "", "", fmt.Errorf("getting DataVolume %s: %w", key, err)
		}
		if err := r.sim.client.Get(ctx, key, &corev1.PersistentVolumeClaim{}); err != nil {
			if apierrors.IsNotFound(err) {
				return corev1.ConditionFalse, "NotFound", "PVC not found", nil
			}
			return "", "", "", fmt.Errorf("getting PVC %s: %w", key, err)
		}
		return corev1.ConditionTrue, "Ready", "DataSource is ready to be consumed", nil
	case src.Snapshot != nil:
		ns := src.Snapshot.Namespace
		if ns == "" {
			ns = ds.Namespace
		}
		key := types.NamespacedName{Namespace: ns, Name: src.Snapshot.Name}
		snap := &snapshotv1.VolumeSnapshot{}
		if err := r.sim.client.Get(ctx, key, snap); err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				return corev1.ConditionFalse, "NotFound", "Snapshot not found", nil
			}
			return "", "", "", fmt.Errorf("getting VolumeSnapshot %s: %w", key, err)
		}
		if snapshotReady(snap) {
			return corev1.ConditionTrue, "Ready", "DataSource is ready to be consumed", nil
		}
		return corev1.ConditionFalse, "SnapshotNotReady", "Snapshot phase is not ready", nil
	}
	return corev1.ConditionFalse, "NoSource", "No source PVC set", nil
}

// setDataSourceReady sets the Ready condition like CDI's
// updateDataSourceCondition: times move only on a change.
func setDataSourceReady(conds []cdiv1.DataSourceCondition, status corev1.ConditionStatus, reason, msg string) []cdiv1.DataSourceCondition {
	now := metav1.Now()
	for i := range conds {
		c := &conds[i]
		if c.Type != cdiv1.DataSourceReady {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		if c.Status != status || c.Reason != reason || c.Message != msg {
			c.LastHeartbeatTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return conds
	}
	return append(conds, cdiv1.DataSourceCondition{Type: cdiv1.DataSourceReady, ConditionState: cdiv1.ConditionState{
		Status: status, Reason: reason, Message: msg, LastTransitionTime: now, LastHeartbeatTime: now}})
}
