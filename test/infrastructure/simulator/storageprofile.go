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
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// capabilities are the access and volume modes CDI knows a provisioner to
// support, first the one it prefers, by provisioner. A subset of CDI's
// table (pkg/storagecapabilities/storagecapabilities.go,
// CapabilitiesByProvisionerKey): provisioners whose key depends on class
// parameters are listed under their plain name only.
var capabilities = map[string][]cdiv1.ClaimPropertySet{
	"kubevirt.io.hostpath-provisioner":   {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"kubevirt.io/hostpath-provisioner":   {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"k8s.io/minikube-hostpath":           {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"nfs.csi.k8s.io":                     {claimProps(corev1.ReadWriteMany, corev1.PersistentVolumeFilesystem)},
	"rbd.csi.ceph.com":                   rbdCapabilities(),
	"rook-ceph.rbd.csi.ceph.com":         rbdCapabilities(),
	"openshift-storage.rbd.csi.ceph.com": rbdCapabilities(),
	"cephfs.csi.ceph.com": {claimProps(corev1.ReadWriteMany, corev1.PersistentVolumeFilesystem),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"rook-ceph.cephfs.csi.ceph.com": {claimProps(corev1.ReadWriteMany, corev1.PersistentVolumeFilesystem),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"topolvm.io": {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)},
	"ebs.csi.aws.com":       {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock)},
	"disk.csi.azure.com":    {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock)},
	"pd.csi.storage.gke.io": {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock)},
	"driver.longhorn.io":    {claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock)},
}

// advisedCloneStrategies are the clone strategies CDI advises for some
// provisioners, whatever snapshot classes exist (a subset of
// CloneStrategyByProvisionerKey in the same file).
var advisedCloneStrategies = map[string]cdiv1.CDICloneStrategy{
	"rbd.csi.ceph.com":                   cdiv1.CloneStrategyCsiClone,
	"rook-ceph.rbd.csi.ceph.com":         cdiv1.CloneStrategyCsiClone,
	"openshift-storage.rbd.csi.ceph.com": cdiv1.CloneStrategyCsiClone,
	"cephfs.csi.ceph.com":                cdiv1.CloneStrategyCsiClone,
	"rook-ceph.cephfs.csi.ceph.com":      cdiv1.CloneStrategyCsiClone,
	"topolvm.io":                         cdiv1.CloneStrategyHostAssisted,
	"pd.csi.storage.gke.io":              cdiv1.CloneStrategySnapshot,
}

// advisedSourceFormats are the DataImportCron source formats CDI advises
// (a subset of SourceFormatsByProvisionerKey in the same file).
var advisedSourceFormats = map[string]cdiv1.DataImportCronSourceFormat{
	"rook-ceph.rbd.csi.ceph.com":         cdiv1.DataImportCronSourceFormatSnapshot,
	"openshift-storage.rbd.csi.ceph.com": cdiv1.DataImportCronSourceFormatSnapshot,
	"pd.csi.storage.gke.io":              cdiv1.DataImportCronSourceFormatSnapshot,
}

func claimProps(mode corev1.PersistentVolumeAccessMode, volumeMode corev1.PersistentVolumeMode) cdiv1.ClaimPropertySet {
	return cdiv1.ClaimPropertySet{AccessModes: []corev1.PersistentVolumeAccessMode{mode}, VolumeMode: ptr.To(volumeMode)}
}

func rbdCapabilities() []cdiv1.ClaimPropertySet {
	return []cdiv1.ClaimPropertySet{
		claimProps(corev1.ReadWriteMany, corev1.PersistentVolumeBlock),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem),
	}
}

// errIncompleteClaimPropertySet is CDI's refusal of a StorageProfile spec
// whose claim property set lacks a volume or access mode.
var errIncompleteClaimPropertySet = errors.New("each ClaimPropertySet must provide both volume mode and access modes")

// profileStatus is the status CDI's StorageProfile controller computes for
// the profile of class sc from the profile's spec and the class's
// snapshot class ("" for none) (pkg/controller/storageprofile-controller.go,
// reconcileStorageProfile, reconcileCloneStrategy,
// reconcileDataImportCronSourceFormat, reconcilePropertySets).
func profileStatus(sc *storagev1.StorageClass, spec cdiv1.StorageProfileSpec, snapClass string) (cdiv1.StorageProfileStatus, error) {
	st := cdiv1.StorageProfileStatus{
		StorageClass: ptr.To(sc.Name),
		Provisioner:  ptr.To(sc.Provisioner),
	}
	if snapClass != "" {
		st.SnapshotClass = ptr.To(snapClass)
	}
	st.CloneStrategy = ptr.To(profileCloneStrategy(sc, spec.CloneStrategy, snapClass))
	st.DataImportCronSourceFormat = ptr.To(profileSourceFormat(sc, spec.DataImportCronSourceFormat, snapClass))
	if len(spec.ClaimPropertySets) > 0 {
		for _, cps := range spec.ClaimPropertySets {
			if cps.VolumeMode == nil || len(cps.AccessModes) == 0 {
				return st, errIncompleteClaimPropertySet
			}
		}
		st.ClaimPropertySets = spec.ClaimPropertySets
		return st, nil
	}
	// An empty list, not none: the profile shows claimPropertySets: [].
	st.ClaimPropertySets = []cdiv1.ClaimPropertySet{}
	for _, cps := range capabilities[sc.Provisioner] {
		st.ClaimPropertySets = append(st.ClaimPropertySets, *cps.DeepCopy())
	}
	return st, nil
}

// profileCloneStrategy: the profile's spec, else the class's
// cdi.kubevirt.io/clone-strategy annotation, else the provisioner's advised
// strategy, else snapshot when the class has a snapshot class; snapshot
// without a snapshot class falls back to copy.
func profileCloneStrategy(sc *storagev1.StorageClass, desired *cdiv1.CDICloneStrategy, snapClass string) cdiv1.CDICloneStrategy {
	if desired != nil {
		return *desired
	}
	if v, ok := sc.Annotations[annCloneStrategy]; ok {
		switch v {
		case "copy":
			return cdiv1.CloneStrategyHostAssisted
		case "snapshot":
			return cdiv1.CloneStrategySnapshot
		case "csi-clone":
			return cdiv1.CloneStrategyCsiClone
		}
		// CDI answers an unknown value with the empty strategy.
		return ""
	}
	strategy := cdiv1.CloneStrategyHostAssisted
	if snapClass != "" {
		strategy = cdiv1.CloneStrategySnapshot
	}
	if advised, ok := advisedCloneStrategies[sc.Provisioner]; ok {
		strategy = advised
	}
	if strategy == cdiv1.CloneStrategySnapshot && snapClass == "" {
		return cdiv1.CloneStrategyHostAssisted
	}
	return strategy
}

// profileSourceFormat: the spec's, else the advised one, else pvc; snapshot
// without a snapshot class falls back to pvc.
func profileSourceFormat(sc *storagev1.StorageClass, desired *cdiv1.DataImportCronSourceFormat, snapClass string) cdiv1.DataImportCronSourceFormat {
	if desired != nil {
		return *desired
	}
	format := cdiv1.DataImportCronSourceFormatPvc
	if advised, ok := advisedSourceFormats[sc.Provisioner]; ok {
		format = advised
	}
	if format == cdiv1.DataImportCronSourceFormatSnapshot && snapClass == "" {
		return cdiv1.DataImportCronSourceFormatPvc
	}
	return format
}

// storageProfileReconciler plays CDI's StorageProfile controller: one
// StorageProfile per StorageClass, of the same name, whose status says how
// CDI uses the class, and which goes when the class goes.
type storageProfileReconciler struct {
	sim *Simulator
}

func (r *storageProfileReconciler) setup(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("sim-storageprofile").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&storagev1.StorageClass{}).
		Watches(&cdiv1.StorageProfile{}, &handler.EnqueueRequestForObject{})
	if _, err := mgr.GetRESTMapper().RESTMapping(snapshotv1.SchemeGroupVersion.WithKind("VolumeSnapshotClass").GroupKind(),
		snapshotv1.SchemeGroupVersion.Version); err == nil {
		// A snapshot class for a class's provisioner changes its clone
		// strategy (addStorageProfileControllerWatches).
		b = b.Watches(&snapshotv1.VolumeSnapshotClass{}, handler.EnqueueRequestsFromMapFunc(r.classesOfDriver))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("setting up StorageProfile simulator: %w", err)
	}
	return nil
}

// classesOfDriver maps a VolumeSnapshotClass to the storage classes of its
// driver.
func (r *storageProfileReconciler) classesOfDriver(ctx context.Context, obj client.Object) []reconcile.Request {
	vsc, ok := obj.(*snapshotv1.VolumeSnapshotClass)
	if !ok {
		return nil
	}
	list := &storagev1.StorageClassList{}
	if err := r.sim.client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Provisioner == vsc.Driver {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return reqs
}

// Reconcile makes the profile of one class match it, or deletes the
// profile of a class that is gone.
func (r *storageProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sc := &storagev1.StorageClass{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, sc); err != nil || sc.DeletionTimestamp != nil {
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting StorageClass %s: %w", req.Name, err)
		}
		sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: req.Name}}
		return ctrl.Result{}, client.IgnoreNotFound(r.sim.client.Delete(ctx, sp))
	}
	sp, err := r.sim.storageProfile(ctx, sc.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	if sp == nil {
		sp = &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: sc.Name, Labels: map[string]string{
			"app": "containerized-data-importer", "cdi.kubevirt.io": "",
			"app.kubernetes.io/managed-by": "cdi-controller", "app.kubernetes.io/component": "storage",
		}}}
		// The API server drops the status of a create; it is written below.
		if err := r.sim.client.Create(ctx, sp); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating StorageProfile %s: %w", sc.Name, err)
		}
	}
	snapClass, err := r.sim.snapshotClassFor(ctx, sc.Provisioner, sp.Spec.SnapshotClass)
	if err != nil && !meta.IsNoMatchError(err) {
		return ctrl.Result{}, err
	}
	st, err := profileStatus(sc, sp.Spec, snapClass)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("unable to update StorageProfile %s: %w", sc.Name, err)
	}
	if equality.Semantic.DeepEqual(st, sp.Status) {
		return ctrl.Result{}, nil
	}
	sp.Status = st
	if err := r.sim.client.Status().Update(ctx, sp); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status of StorageProfile %s: %w", sc.Name, err)
	}
	return ctrl.Result{}, nil
}
