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
	"slices"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The storage side of a cluster as CDI and the CSI sidecars see it:
// storage classes and their StorageProfiles (storageprofile.go), the PVCs
// of DataVolumes (datavolume_claim.go), a provisioner binding every claim
// it can (claim_controller.go), clone strategies (datavolume_clone.go) and
// VolumeSnapshots (volumesnapshot.go). envtest runs none of them.

// Annotations and labels CDI and Kubernetes put on storage objects.
const (
	// AnnCloneType is the clone strategy CDI used for a clone, on the target
	// PVC and the DataVolume: snapshot, csi-clone or copy (host-assisted)
	// (pkg/controller/common/util.go, AnnCloneType).
	AnnCloneType = "cdi.kubevirt.io/cloneType"
	// annCloneFallbackReason says why a clone fell back to copy
	// (pkg/controller/populators/clone-populator.go).
	annCloneFallbackReason = "cdi.kubevirt.io/cloneFallbackReason"
	// annUsePopulator says whether CDI's volume populators fill the
	// DataVolume's PVC (pkg/controller/common/util.go, AnnUsePopulator).
	annUsePopulator = "cdi.kubevirt.io/storage.usePopulator"
	// annCloneStrategy on a StorageClass asks for a clone strategy
	// (pkg/controller/storageprofile-controller.go, reconcileCloneStrategy).
	annCloneStrategy = "cdi.kubevirt.io/clone-strategy"
	// annDefaultStorageClass marks the cluster's default storage class.
	annDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"
	// annDefaultVirtStorageClass marks the class CDI prefers for VM disks
	// (pkg/controller/common/util.go, AnnDefaultVirtStorageClass).
	annDefaultVirtStorageClass = "storageclass.kubevirt.io/is-default-virt-class"
	// annDefaultSnapshotClass marks a driver's default VolumeSnapshotClass.
	annDefaultSnapshotClass = "snapshot.storage.kubernetes.io/is-default-class"

	// provisionerNone is the provisioner of classes with only static
	// volumes (k8s.io/component-helpers/storage/volume,
	// NotSupportedProvisioner).
	provisionerNone = "kubernetes.io/no-provisioner"
)

// storageClassNamed returns the class name names, or the default class CDI
// falls back to for a DataVolume that names none: the default virt class,
// then the cluster's default, the newest first
// (pkg/controller/common/util.go, GetStorageClassByNameWithVirtFallback,
// GetPlatformDefaultStorageClass). nil when there is none. virt is false
// for lookups that skip the virt default (GetStorageClassByNameWithK8sFallback).
func (s *Simulator) storageClassNamed(ctx context.Context, name *string, virt bool) (*storagev1.StorageClass, error) {
	if name != nil {
		if *name == "" {
			return nil, nil
		}
		sc := &storagev1.StorageClass{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: *name}, sc); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("getting StorageClass %s: %w", *name, err)
		}
		return sc, nil
	}
	list := &storagev1.StorageClassList{}
	if err := s.client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing StorageClasses: %w", err)
	}
	if virt {
		if sc := newestDefault(list.Items, annDefaultVirtStorageClass); sc != nil {
			return sc, nil
		}
	}
	return newestDefault(list.Items, annDefaultStorageClass), nil
}

// newestDefault is the newest class annotated ann "true" (ties: the first
// name), as Kubernetes picks among several defaults.
func newestDefault(classes []storagev1.StorageClass, ann string) *storagev1.StorageClass {
	var best *storagev1.StorageClass
	for i := range classes {
		sc := &classes[i]
		if sc.Annotations[ann] != "true" {
			continue
		}
		if best == nil || sc.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(sc.CreationTimestamp.Equal(&best.CreationTimestamp) && sc.Name < best.Name) {
			best = sc
		}
	}
	return best
}

// storageProfile returns the StorageProfile of the class name, nil when
// there is none (or the API server does not serve StorageProfiles).
func (s *Simulator) storageProfile(ctx context.Context, name string) (*cdiv1.StorageProfile, error) {
	sp := &cdiv1.StorageProfile{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: name}, sp); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting StorageProfile %s: %w", name, err)
	}
	return sp, nil
}

// csiDriverExists reports whether a CSIDriver object of that name exists:
// what makes CDI count a class as CSI storage and fill its PVCs with its
// volume populators (pkg/controller/datavolume/util.go,
// storageClassCSIDriverExists).
func (s *Simulator) csiDriverExists(ctx context.Context, name string) (bool, error) {
	err := s.client.Get(ctx, types.NamespacedName{Name: name}, &storagev1.CSIDriver{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("getting CSIDriver %s: %w", name, err)
}

// snapshotClassFor picks the VolumeSnapshotClass for driver the way CDI
// does: the one named, if its driver matches; else the driver's class
// annotated as default, else the first of its classes by name
// (pkg/controller/common/util.go, GetVolumeSnapshotClass). "" when there
// is none, or the API server serves no snapshot classes.
func (s *Simulator) snapshotClassFor(ctx context.Context, driver string, named *string) (string, error) {
	if driver == "" {
		return "", nil
	}
	if named != nil {
		vsc := &snapshotv1.VolumeSnapshotClass{}
		if err := s.client.Get(ctx, types.NamespacedName{Name: *named}, vsc); err != nil {
			return "", fmt.Errorf("getting VolumeSnapshotClass %s: %w", *named, err)
		}
		if vsc.Driver == driver {
			return vsc.Name, nil
		}
		return "", nil
	}
	list := &snapshotv1.VolumeSnapshotClassList{}
	if err := s.client.List(ctx, list); err != nil {
		if meta.IsNoMatchError(err) {
			return "", nil
		}
		return "", fmt.Errorf("listing VolumeSnapshotClasses: %w", err)
	}
	var candidates []string
	for i := range list.Items {
		vsc := &list.Items[i]
		if vsc.Driver != driver {
			continue
		}
		if vsc.Annotations[annDefaultSnapshotClass] == "true" {
			return vsc.Name, nil
		}
		candidates = append(candidates, vsc.Name)
	}
	if len(candidates) == 0 {
		return "", nil
	}
	slices.Sort(candidates)
	return candidates[0], nil
}

// claimDriver is the CSI driver of a claim's volume: its class's
// provisioner (the simulator makes no PersistentVolumes, whose
// spec.csi.driver the CSI sidecars read). "" for a claim with no class.
func (s *Simulator) claimDriver(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return "", nil
	}
	sc, err := s.storageClassNamed(ctx, pvc.Spec.StorageClassName, false)
	if err != nil || sc == nil {
		return "", err
	}
	return sc.Provisioner, nil
}

// volumeModeOf is a claim's volume mode, Filesystem when unset
// (pkg/util/util.go, ResolveVolumeMode).
func volumeModeOf(mode *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if mode != nil && *mode == corev1.PersistentVolumeBlock {
		return corev1.PersistentVolumeBlock
	}
	return corev1.PersistentVolumeFilesystem
}

// setupStorage registers the storage stand-ins: CDI's StorageProfile
// controller, a provisioner and the claim controllers of
// kube-controller-manager, and the CSI snapshot controller with its
// sidecar. Kinds the API server does not serve are left out, as CDI leaves
// out their watches.
func (s *Simulator) setupStorage(mgr ctrl.Manager) error {
	served := func(gvk schema.GroupVersionKind) bool {
		_, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		return err == nil
	}
	if served(cdiv1.SchemeGroupVersion.WithKind("StorageProfile")) {
		if err := (&storageProfileReconciler{sim: s}).setup(mgr); err != nil {
			return err
		}
	}
	if err := (&claimReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	if served(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshot")) &&
		served(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotContent")) {
		if err := (&snapshotReconciler{sim: s}).setup(mgr); err != nil {
			return err
		}
	}
	return nil
}
