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
	"strconv"
	"sync"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons and messages CDI reports when a DataVolume's PVC is in its way
// (pkg/controller/datavolume/controller-base.go) or cannot be rendered
// (pkg/controller/common/util.go, ErrClaimNotValid).
const (
	reasonResourceExists   = "ErrResourceExists"
	msgResourceExists      = "Resource %q already exists and is not managed by DataVolume"
	reasonResourceDeleting = "ErrResourceMarkedForDeletion"
	msgResourceDeleting    = "Resource %q marked for deletion"
	reasonClaimNotValid    = "ErrClaimNotValid"
)

// dvStorage is what CDI's DataVolume controllers read about a DataVolume's
// storage before they act.
type dvStorage struct {
	// claim is the DataVolume's PVC, nil before CDI creates it.
	claim *corev1.PersistentVolumeClaim
	// class is the PVC's storage class, nil when it has none.
	class *storagev1.StorageClass
	// spec is the PVC's spec: the claim's, or the one CDI renders.
	spec      corev1.PersistentVolumeClaimSpec
	renderErr error
	// populator: CDI's volume populators fill the PVC (a CSI class).
	populator bool
	// clone is the clone's plan and any fallback; the zero value for an
	// import.
	clone cloneChoice
	// copyBytes is the size a host-assisted clone copies.
	copyBytes int64
	// notReady says why CDI cannot render the PVC yet ("": it can).
	notReady string
}

// storageOf gathers the DataVolume's storage: its PVC, class and profile,
// the PVC spec CDI would render, whether populators fill it, and for a
// clone the strategy, saved on the PVC once it exists (as the clone
// populator keeps it, getSavedCloneStrategy) or chosen now.
func (r *dataVolumeReconciler) storageOf(ctx context.Context, dv *cdiv1.DataVolume, src *cloneSource) (*dvStorage, error) {
	st := &dvStorage{}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: dv.Namespace, Name: dv.Name}, pvc); err == nil {
		st.claim = pvc
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting PVC of DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	var profile *cdiv1.StorageProfile
	var err error
	switch {
	case st.claim != nil:
		st.class, err = r.sim.storageClassNamed(ctx, st.claim.Spec.StorageClassName, false)
	case dv.Spec.Storage != nil:
		st.class, err = r.sim.storageClassNamed(ctx, dv.Spec.Storage.StorageClassName, true)
	case dv.Spec.PVC != nil:
		st.class, err = r.sim.storageClassNamed(ctx, dv.Spec.PVC.StorageClassName, false)
	}
	if err != nil {
		return nil, err
	}
	if st.class != nil {
		if profile, err = r.sim.storageProfile(ctx, st.class.Name); err != nil {
			return nil, err
		}
		if st.claim == nil && (profile == nil || profile.Status.StorageClass == nil) {
			// CDI reads the profile to render the PVC and retries until
			// its controller has made it.
			st.notReady = fmt.Sprintf("StorageProfile %s is not reconciled yet", st.class.Name)
		}
	}
	srcSize := sourceSize(src)
	if st.claim != nil {
		st.spec = st.claim.Spec
	} else {
		var detected resource.Quantity
		if srcSize != nil {
			detected = *srcSize
		}
		st.spec, st.renderErr = renderClaimSpec(dv, st.class, profile, src != nil, detected)
	}
	if st.populator, err = r.usesPopulator(ctx, dv, st.class); err != nil {
		return nil, err
	}
	if src == nil {
		return st, nil
	}
	st.copyBytes = st.spec.Resources.Requests.Storage().Value()
	if srcSize != nil {
		st.copyBytes = srcSize.Value()
	}
	if st.claim != nil {
		if saved, ok := st.claim.Annotations[AnnCloneType]; ok {
			st.clone.plan = clonePlan{strategy: cdiv1.CDICloneStrategy(saved), fromSnapshot: src.kind == "snapshot", populator: st.populator}
			return st, nil
		}
	}
	in, err := r.cloneInputOf(ctx, src, st, profile)
	if err != nil {
		return nil, err
	}
	st.clone = chooseCloneStrategy(in)
	return st, nil
}

// sourceSize is what a clone copies: the source PVC's capacity (its
// request while unbound) or the snapshot's restore size; nil when unknown.
func sourceSize(src *cloneSource) *resource.Quantity {
	switch {
	case src == nil:
	case src.pvc != nil:
		if c, ok := src.pvc.Status.Capacity[corev1.ResourceStorage]; ok {
			return &c
		}
		if r, ok := src.pvc.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			return &r
		}
	case src.snapshot != nil && src.snapshot.Status != nil && src.snapshot.Status.RestoreSize != nil:
		return src.snapshot.Status.RestoreSize
	}
	return nil
}

// usesPopulator is CDI's shouldUseCDIPopulator
// (pkg/controller/datavolume/controller-base.go): the DataVolume's
// cdi.kubevirt.io/storage.usePopulator annotation, which CDI itself sets
// on first sight, else whether the class's provisioner has a CSIDriver.
func (r *dataVolumeReconciler) usesPopulator(ctx context.Context, dv *cdiv1.DataVolume, sc *storagev1.StorageClass) (bool, error) {
	if v, ok := dv.Annotations[annUsePopulator]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			return b, nil
		}
	}
	if sc == nil {
		return false, nil
	}
	return r.sim.csiDriverExists(ctx, sc.Provisioner)
}

// cloneInputOf reads what chooseCloneStrategy decides on: the source's
// driver, volume mode and size, and for a PVC source the snapshot class
// both PVCs can use (pkg/controller/clone/common.go, GetCommonDriver,
// GetCompatibleVolumeSnapshotClass).
func (r *dataVolumeReconciler) cloneInputOf(ctx context.Context, src *cloneSource, st *dvStorage, profile *cdiv1.StorageProfile) (cloneInput, error) {
	in := cloneInput{
		fromSnapshot: src.kind == "snapshot", target: st.class, targetSpec: st.spec, profile: profile,
		populator: st.populator, sourceSize: sourceSize(src), fallback: r.sim.opts.CloneStrategy,
	}
	in.sourceMode = volumeModeOf(st.spec.VolumeMode)
	switch {
	case src.pvc != nil:
		in.sourceMode = volumeModeOf(src.pvc.Spec.VolumeMode)
		driver, err := r.sim.claimDriver(ctx, src.pvc)
		if err != nil {
			return in, err
		}
		in.sourceDriver = driver
		if st.class == nil || driver != st.class.Provisioner {
			return in, nil
		}
		var named *string
		if srcProfile, err := r.sim.storageProfile(ctx, *src.pvc.Spec.StorageClassName); err != nil {
			return in, err
		} else if srcProfile != nil && profile != nil && srcProfile.Status.SnapshotClass != nil && profile.Status.SnapshotClass != nil &&
			*srcProfile.Status.SnapshotClass == *profile.Status.SnapshotClass {
			named = profile.Status.SnapshotClass
		}
		in.snapshotClass, err = r.sim.snapshotClassFor(ctx, driver, named)
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return in, err
		}
	case src.snapshot != nil:
		content, err := r.sim.snapshotContentOf(ctx, src.snapshot)
		if err != nil {
			return in, err
		}
		if content != nil {
			in.sourceDriver = content.Spec.Driver
			if content.Spec.SourceVolumeMode != nil {
				in.sourceMode = *content.Spec.SourceVolumeMode
			}
		}
	}
	return in, nil
}

// snapshotContentOf is the VolumeSnapshotContent bound to snap, nil when
// none is (yet).
func (s *Simulator) snapshotContentOf(ctx context.Context, snap *snapshotv1.VolumeSnapshot) (*snapshotv1.VolumeSnapshotContent, error) {
	if snap.Status == nil || snap.Status.BoundVolumeSnapshotContentName == nil {
		return nil, nil
	}
	content := &snapshotv1.VolumeSnapshotContent{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: *snap.Status.BoundVolumeSnapshotContentName}, content); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting VolumeSnapshotContent %s: %w", *snap.Status.BoundVolumeSnapshotContentName, err)
	}
	return content, nil
}

// errHeld says CDI cannot go on with the DataVolume yet; the reason has
// been reported.
var errHeld = errors.New("held")

// ensureClaim creates the DataVolume's PVC, or checks that the one of its
// name is its own: a PVC being deleted, or one the DataVolume does not
// control, holds it with a Warning event (validatePVC). A refused render
// is an ErrClaimNotValid Warning. errHeld when the DataVolume cannot go on.
func (r *dataVolumeReconciler) ensureClaim(ctx context.Context, dv *cdiv1.DataVolume, st *dvStorage, src *cloneSource) error {
	if pvc := st.claim; pvc != nil {
		switch {
		case pvc.DeletionTimestamp != nil:
			r.warn(dv, reasonResourceDeleting, fmt.Sprintf(msgResourceDeleting, pvc.Name))
			return errHeld
		case !metav1.IsControlledBy(pvc, dv):
			r.warn(dv, reasonResourceExists, fmt.Sprintf(msgResourceExists, pvc.Name))
			return errHeld
		}
		return nil
	}
	if st.renderErr != nil {
		r.warn(dv, reasonClaimNotValid, st.renderErr.Error())
		return errHeld
	}
	if err := r.annotateDataVolume(ctx, dv, st); err != nil {
		return err
	}
	extra := importAnnotations(dv.Spec.Source)
	if src != nil {
		extra = cloneAnnotations(dv, src, st.clone)
	}
	pvc := newClaim(dv, st.spec, extra)
	if err := r.sim.client.Create(ctx, pvc); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return errHeld
		}
		return fmt.Errorf("creating PVC of DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	st.claim = pvc
	if st.clone.fallbackReason != "" && r.recorder != nil {
		r.recorder.Eventf(pvc, nil, corev1.EventTypeWarning, st.clone.fallbackReason, "Clone", "%s", st.clone.fallbackMessage)
	}
	return nil
}

// annotateDataVolume records on the DataVolume whether populators fill it
// and, for a clone, its strategy, as CDI does before it creates the PVC
// (updateDataVolumeUseCDIPopulator; pvc-clone-controller.go and
// snapshot-clone-controller.go, syncClone: AnnCloneType), with a merge
// patch that touches nothing else.
func (r *dataVolumeReconciler) annotateDataVolume(ctx context.Context, dv *cdiv1.DataVolume, st *dvStorage) error {
	want := map[string]string{annUsePopulator: strconv.FormatBool(st.populator)}
	if isClone(dv) && st.clone.plan.strategy != "" {
		want[AnnCloneType] = string(st.clone.plan.strategy)
	}
	changed := map[string]string{}
	for k, v := range want {
		if dv.Annotations[k] != v {
			changed[k] = v
		}
	}
	if len(changed) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changed}})
	if err != nil {
		return err
	}
	if err := r.sim.client.Patch(ctx, dv, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotating DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	return nil
}

// warn records a Warning event on the DataVolume.
func (r *dataVolumeReconciler) warn(dv *cdiv1.DataVolume, reason, msg string) {
	if r.recorder != nil {
		r.recorder.Eventf(dv, nil, corev1.EventTypeWarning, reason, "Sync", "%s", msg)
	}
}

// populate makes a DataVolume's PVC hold what CDI wrote: nothing for a
// blank disk, the source's content for a clone or a restore, and, for an
// import, the golden image an unpopulated volume reads as.
func (r *dataVolumeReconciler) populate(dv *cdiv1.DataVolume, claim *corev1.PersistentVolumeClaim, src *cloneSource) error {
	switch {
	case claim == nil:
		return nil
	case src != nil && src.pvc != nil:
		return r.sim.populateFrom(src.pvc.UID, claim.UID)
	case src != nil && src.snapshot != nil:
		return r.sim.populateFrom(src.snapshot.UID, claim.UID)
	case dv.Spec.Source != nil && dv.Spec.Source.Blank != nil:
		return r.sim.populateBlank(claim.UID)
	}
	return nil
}

// reasonCloneSourceInUse is CDI's Warning on a clone's target PVC while a
// pod uses its source (pkg/controller/common/util.go, CloneSourceInUse).
const reasonCloneSourceInUse = "CloneSourceInUse"

// sourceReady reports whether a clone's source can be read: a snapshot
// readyToUse; a PVC bound, populated (the DataVolume owning it, if any,
// Succeeded) and used read-write by no unfinished pod
// (pkg/controller/clone/common.go, IsSourceClaimReady;
// pkg/controller/clone-controller.go, the legacy clone). For a PVC in use
// it records CDI's Warning on the target PVC when the wait starts.
func (r *dataVolumeReconciler) sourceReady(ctx context.Context, dv *cdiv1.DataVolume, src *cloneSource, target *corev1.PersistentVolumeClaim) (bool, error) {
	switch {
	case src == nil:
		return true, nil
	case src.snapshot != nil:
		return snapshotReady(src.snapshot), nil
	case src.pvc == nil || dv.Status.Phase != cdiv1.CloneScheduled:
		return true, nil
	case src.pvc.Status.Phase != corev1.ClaimBound:
		return false, nil
	}
	if owner := metav1.GetControllerOf(src.pvc); owner != nil && owner.Kind == "DataVolume" {
		srcDV := &cdiv1.DataVolume{}
		err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: src.namespace, Name: owner.Name}, srcDV)
		if err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("getting DataVolume %s/%s: %w", src.namespace, owner.Name, err)
		}
		if err == nil && srcDV.UID == owner.UID && srcDV.Status.Phase != cdiv1.Succeeded {
			return false, nil
		}
	}
	users, err := r.sim.podsUsingClaim(ctx, src.namespace, src.name)
	if err != nil {
		return false, err
	}
	if len(users) > 0 {
		if r.inUse.report(dv.UID) && r.recorder != nil && target != nil {
			r.recorder.Eventf(target, nil, corev1.EventTypeWarning, reasonCloneSourceInUse, "Clone",
				"pod %s/%s using PersistentVolumeClaim %s", users[0].Namespace, users[0].Name, src.name)
		}
		return false, nil
	}
	r.inUse.forget(dv.UID)
	return true, nil
}

// reportOnce remembers the clones whose wait for a busy source was
// reported, so that the Warning is recorded once per wait.
type reportOnce struct {
	mu   sync.Mutex
	seen map[types.UID]bool
}

// report says whether the wait of uid is to be reported now.
func (o *reportOnce) report(uid types.UID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[uid] {
		return false
	}
	if o.seen == nil {
		o.seen = map[types.UID]bool{}
	}
	o.seen[uid] = true
	return true
}

func (o *reportOnce) forget(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, uid)
}
