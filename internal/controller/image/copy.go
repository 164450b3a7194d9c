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

package image

import (
	"context"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
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

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// copyKey is where an image's copy, its snapshot and its DataSource live:
// the image's name, in the images namespace.
func (r *Reconciler) copyKey(img *macvirtv1alpha1.MacImage) types.NamespacedName {
	return types.NamespacedName{Namespace: r.ImagesNamespace, Name: img.Name}
}

// ownedBy reports whether obj's controller is the image.
func ownedBy(obj metav1.Object, img *macvirtv1alpha1.MacImage) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == img.UID
}

func imageOwner(img *macvirtv1alpha1.MacImage) []metav1.OwnerReference {
	return []metav1.OwnerReference{*metav1.NewControllerRef(img, macvirtv1alpha1.GroupVersion.WithKind("MacImage"))}
}

// observeCopy reads the copy's DataVolume, if it exists.
func (r *Reconciler) observeCopy(ctx context.Context, s *imageScope) (bool, error) {
	dv := &cdiv1.DataVolume{}
	key := r.copyKey(s.Image)
	if err := base.GetOptional(ctx, r.Client, key, dv); err != nil {
		return false, err
	}
	switch {
	case dv.Name == "":
		return true, nil
	case !ownedBy(dv, s.Image):
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned,
			Message: fmt.Sprintf("DataVolume %s exists and is not this image's; delete it or capture under another name", key)}, true
		return false, nil
	}
	s.Copy = dv
	return true, nil
}

// ensureCopy has CDI clone the stopped Mac's system disk into the images
// namespace, at its size, on the image's storage class (the source's when
// unset); CDI picks the clone strategy from the StorageProfile.
func (r *Reconciler) ensureCopy(ctx context.Context, s *imageScope) (bool, error) {
	if s.Copy == nil {
		src := s.Source
		key := r.copyKey(s.Image)
		storage := &cdiv1.StorageSpec{StorageClassName: s.Image.Spec.StorageClassName}
		if st := src.Spec.Storage; st != nil {
			storage.Resources = *st.Resources.DeepCopy()
			if storage.StorageClassName == nil {
				storage.StorageClassName = st.StorageClassName
			}
		}
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, OwnerReferences: imageOwner(s.Image),
				Labels: map[string]string{macvirtv1alpha1.LabelImage: s.Image.Name},
				// Nothing consumes the copy: on a WaitForFirstConsumer class
				// CDI would wait for a consumer forever, the Mac stopped.
				Annotations: map[string]string{annImmediateBinding: "true"}},
			Spec: cdiv1.DataVolumeSpec{
				Source:  &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: src.Namespace, Name: src.Name}},
				Storage: storage,
			},
		}
		if err := r.Create(ctx, dv); apierrors.IsNotFound(err) {
			s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonCopying,
				Message: fmt.Sprintf("the images namespace %s does not exist: create it (kubectl create namespace %s)", key.Namespace, key.Namespace)}
			return false, nil
		} else if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating DataVolume %s to copy MacMachine %s/%s's disk: %w", key, s.Machine.Namespace, s.Machine.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("copying the Mac's system disk", "dataVolume", key, "source", client.ObjectKeyFromObject(src))
		s.Copy = dv
	}
	switch s.Copy.Status.Phase {
	case cdiv1.Succeeded:
		return true, nil
	case cdiv1.Failed:
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonCopyFailed,
			Message: fmt.Sprintf("CDI failed to clone the disk (DataVolume %s/%s): %s", s.Copy.Namespace, s.Copy.Name, dataVolumeMessage(s.Copy))}, true
	}
	if started := s.Copy.CreationTimestamp; !started.IsZero() && time.Since(started.Time) > CopyTimeout {
		// The tenant's Mac is stopped for as long as the copy takes:
		// give up, which starts it again.
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonCopyFailed, Message: fmt.Sprintf(
			"the copy (DataVolume %s/%s) did not finish within %s (%s): the Mac runs again; delete this MacImage and capture anew once CDI can copy",
			s.Copy.Namespace, s.Copy.Name, CopyTimeout, dataVolumeMessage(s.Copy))}, true
	}
	return false, nil
}

// CopyTimeout is how long a capture waits for CDI's copy, the Mac stopped.
var CopyTimeout = 2 * time.Hour

// annImmediateBinding asks CDI to populate a DataVolume on a
// WaitForFirstConsumer storage class without a consumer
// (pkg/controller/common/util.go, AnnImmediateBinding).
const annImmediateBinding = "cdi.kubevirt.io/storage.bind.immediate.requested"

func dataVolumeMessage(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning && c.Message != "" {
			return c.Message
		}
	}
	return "no message"
}

// ensureSnapshot snapshots the copy where its storage class has a
// VolumeSnapshotClass (machines then restore it, the fastest clone), and
// waits for the snapshot to be ready to use.
func (r *Reconciler) ensureSnapshot(ctx context.Context, s *imageScope) (bool, error) {
	if !r.snapshots {
		return true, nil
	}
	class, err := r.snapshotClassFor(ctx, s.Copy)
	if err != nil || class == "" {
		return err == nil, err
	}
	s.SnapshotClass = class
	key := r.copyKey(s.Image)
	snap := &snapshotv1.VolumeSnapshot{}
	if err := base.GetOptional(ctx, r.Client, key, snap); err != nil {
		return false, err
	}
	if snap.Name == "" {
		snap = &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, OwnerReferences: imageOwner(s.Image),
				Labels: map[string]string{macvirtv1alpha1.LabelImage: s.Image.Name}},
			Spec: snapshotv1.VolumeSnapshotSpec{
				Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(s.Copy.Name)},
				VolumeSnapshotClassName: ptr.To(class),
			},
		}
		if err := r.Create(ctx, snap); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating VolumeSnapshot %s of the copy: %w", key, err)
		}
		return false, nil
	}
	if !ownedBy(snap, s.Image) {
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned,
			Message: fmt.Sprintf("VolumeSnapshot %s exists and is not this image's", key)}, true
		return false, nil
	}
	s.Snapshot = snap
	if st := snap.Status; st != nil && st.Error != nil && st.Error.Message != nil {
		s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonPublishing, Message: "the snapshot of the copy failed: " + *st.Error.Message}
	}
	return snap.Status != nil && ptr.Deref(snap.Status.ReadyToUse, false), nil
}

// snapshotClassFor is the VolumeSnapshotClass of the copy's storage class
// (the one whose driver is its provisioner, the default one first); empty
// when it has none.
func (r *Reconciler) snapshotClassFor(ctx context.Context, dv *cdiv1.DataVolume) (string, error) {
	sc, err := r.storageClassOf(ctx, dv)
	if err != nil || sc == nil {
		return "", err
	}
	var classes snapshotv1.VolumeSnapshotClassList
	if err := r.List(ctx, &classes); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// The cluster serves no snapshots.
			return "", nil
		}
		return "", fmt.Errorf("listing VolumeSnapshotClasses: %w", err)
	}
	found := ""
	for i := range classes.Items {
		c := &classes.Items[i]
		if c.Driver != sc.Provisioner {
			continue
		}
		if c.Annotations[annDefaultSnapshotClass] == "true" {
			return c.Name, nil
		}
		if found == "" {
			found = c.Name
		}
	}
	return found, nil
}

// annDefaultSnapshotClass marks a driver's default VolumeSnapshotClass.
const annDefaultSnapshotClass = "snapshot.storage.kubernetes.io/is-default-class"

// storageClassOf is the DataVolume's storage class: the one it names, else
// the cluster's default; nil when there is none.
func (r *Reconciler) storageClassOf(ctx context.Context, dv *cdiv1.DataVolume) (*storagev1.StorageClass, error) {
	name := ""
	if dv.Spec.Storage != nil {
		name = ptr.Deref(dv.Spec.Storage.StorageClassName, "")
	}
	if name != "" {
		sc := &storagev1.StorageClass{}
		if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: name}, sc); err != nil || sc.Name == "" {
			return nil, err
		}
		return sc, nil
	}
	return base.DefaultStorageClass(ctx, r.Client)
}

// ensureDataSource publishes the image: a DataSource naming the snapshot,
// or the copy's PVC where there is none.
func (r *Reconciler) ensureDataSource(ctx context.Context, s *imageScope) (bool, error) {
	key := r.copyKey(s.Image)
	var src cdiv1.DataSourceSource
	if s.Snapshot != nil {
		src.Snapshot = &cdiv1.DataVolumeSourceSnapshot{Namespace: key.Namespace, Name: key.Name}
	} else {
		src.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: key.Namespace, Name: key.Name}
	}
	ds := &cdiv1.DataSource{}
	if err := base.GetOptional(ctx, r.Client, key, ds); err != nil {
		return false, err
	}
	switch {
	case ds.Name == "":
		ds = &cdiv1.DataSource{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, OwnerReferences: imageOwner(s.Image),
				Labels: map[string]string{macvirtv1alpha1.LabelImage: s.Image.Name}},
			Spec: cdiv1.DataSourceSpec{Source: src},
		}
		if err := r.Create(ctx, ds); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("creating DataSource %s: %w", key, err)
		}
	case !ownedBy(ds, s.Image):
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned,
			Message: fmt.Sprintf("DataSource %s exists and is not this image's; delete it or capture under another name", key)}, true
		return false, nil
	case !equality.Semantic.DeepEqual(ds.Spec.Source, src):
		ds.Spec.Source = src
		if err := r.Update(ctx, ds); err != nil {
			return false, fmt.Errorf("updating DataSource %s: %w", key, err)
		}
	}
	s.Published = ds
	return true, nil
}
