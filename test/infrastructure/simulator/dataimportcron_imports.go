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
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The imports of a DataImportCron: the DataVolumes it creates, their PVCs,
// and the DataSource pointing at the latest. CDI's DataVolume controller
// gives each import a PVC of the same name carrying the DataVolume's
// labels; a simulator that makes no PVCs lets the DataVolume stand for its
// PVC wherever CDI looks at the PVC to count or order imports.

// startImport starts the import of digest (createImportDataVolume): a PVC
// of the import's name already there is reused (touched, no DataVolume);
// otherwise the DataVolume is created, one already there being fine.
// Either way it becomes the current import.
func (r *dataImportCronReconciler) startImport(ctx context.Context, dic *cdiv1.DataImportCron, digest string) error {
	name, err := importName(dic.Spec.ManagedDataSource, digest)
	if err != nil {
		return fmt.Errorf("naming the import of DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	current := []cdiv1.ImportStatus{{DataVolumeName: name, Digest: digest}}
	key := types.NamespacedName{Namespace: dic.Namespace, Name: name}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, key, pvc); err == nil {
		if err := r.touchImport(ctx, dic, pvc); err != nil {
			return err
		}
		dic.Status.CurrentImports = current
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting PVC %s: %w", key, err)
	}
	dv := newImportDataVolume(dic, name, time.Now())
	if err := r.sim.client.Create(ctx, dv); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating DataVolume %s: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("DataImportCron import started", "dataVolume", name, "digest", digest)
	dic.Status.CurrentImports = current
	return nil
}

// newImportDataVolume is the cron's template as the import of its desired
// digest (newSourceDataVolume): named name in the cron's namespace, the
// registry URL pinned to the digest, labelled as everything the cron
// creates, annotated for immediate binding and with its time of last use,
// and carrying the cron's retainAfterCompletion annotation. It has no
// owner: CDI ties imports to their cron by label only.
func newImportDataVolume(dic *cdiv1.DataImportCron, name string, now time.Time) *cdiv1.DataVolume {
	dv := dic.Spec.Template.DeepCopy()
	if isRegistryURLSource(dic) {
		url := pinnedImageURL(*dv.Spec.Source.Registry.URL, dic.Annotations[AnnSourceDesiredDigest])
		dv.Spec.Source.Registry.URL = &url
	}
	dv.Name, dv.Namespace = name, dic.Namespace
	cronLabels(dic, dv)
	setAnnotation(dv, AnnImmediateBinding, "true")
	setAnnotation(dv, annLastUseTime, lastUseTime(now))
	if v := dic.Annotations[annPodRetainAfterCompletion]; v != "" {
		setAnnotation(dv, annPodRetainAfterCompletion, v)
	}
	return dv
}

// lastUseTime formats a time of last use as CDI does: UTC, RFC 3339 with
// nanoseconds (trailing zeros dropped).
func lastUseTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// touchImport marks an import's PVC as just used and labels it as the
// cron's (updateSource), which keeps the current import the newest for
// garbage collection.
func (r *dataImportCronReconciler) touchImport(ctx context.Context, dic *cdiv1.DataImportCron, pvc *corev1.PersistentVolumeClaim) error {
	orig := pvc.DeepCopy()
	setAnnotation(pvc, annLastUseTime, lastUseTime(time.Now()))
	cronLabels(dic, pvc)
	if equality.Semantic.DeepEqual(pvc, orig) {
		return nil
	}
	if err := r.sim.client.Update(ctx, pvc); err != nil {
		return fmt.Errorf("updating PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// deleteFailedImport deletes the current import when a new digest is
// wanted and its importer fails (Running=False, reason Error or
// ImagePullFailed): the DataVolume is unlabelled first, then deleted, and
// the cron has no current import (deleteErroneousDataVolume).
func (r *dataImportCronReconciler) deleteFailedImport(ctx context.Context, dic *cdiv1.DataImportCron, dv *cdiv1.DataVolume) error {
	var running *cdiv1.DataVolumeCondition
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == cdiv1.DataVolumeRunning {
			running = &dv.Status.Conditions[i]
		}
	}
	if running == nil || running.Status != corev1.ConditionFalse ||
		(running.Reason != reasonImporterError && running.Reason != reasonImagePullFailed) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting failing DataImportCron import", "dataVolume", dv.Name, "message", running.Message)
	if dv.Labels == nil {
		dv.Labels = map[string]string{}
	}
	dv.Labels[LabelDataImportCronName] = ""
	if err := r.sim.client.Update(ctx, dv); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("unlabelling DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	if err := r.sim.client.Delete(ctx, dv); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting DataVolume %s/%s: %w", dv.Namespace, dv.Name, err)
	}
	dic.Status.CurrentImports = nil
	return nil
}

// Reasons of a failing importer that make CDI give up on an import when a
// newer digest is wanted (pkg/common, GenericError; pkg/controller/util.go,
// ImagePullFailedReason).
const (
	reasonImporterError   = "Error"
	reasonImagePullFailed = "ImagePullFailed"
)

// updateDataSource creates the cron's DataSource, or updates it if the
// cron's name is on it (a DataSource someone else made is left alone), so
// that it carries the cron's labels and its source is the last imported
// PVC, once there is one (updateDataSource, newDataSource,
// populateDataSource in the pvc format). The simulated DataSource
// controller then sets its Ready condition.
func (r *dataImportCronReconciler) updateDataSource(ctx context.Context, dic *cdiv1.DataImportCron) error {
	key := types.NamespacedName{Namespace: dic.Namespace, Name: dic.Spec.ManagedDataSource}
	ds := &cdiv1.DataSource{}
	if err := r.sim.client.Get(ctx, key, ds); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting DataSource %s: %w", key, err)
		}
		ds = &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		cronLabels(dic, ds)
		setDataSourceSource(ds, dic.Status.LastImportedPVC)
		if err := r.sim.client.Create(ctx, ds); err != nil {
			return fmt.Errorf("creating DataSource %s: %w", key, err)
		}
		return nil
	}
	if ds.Labels[LabelDataImportCronName] != dic.Name {
		return nil
	}
	orig := ds.DeepCopy()
	cronLabels(dic, ds)
	setDataSourceSource(ds, dic.Status.LastImportedPVC)
	if equality.Semantic.DeepEqual(ds, orig) {
		return nil
	}
	if err := r.sim.client.Update(ctx, ds); err != nil {
		return fmt.Errorf("updating DataSource %s: %w", key, err)
	}
	return nil
}

func setDataSourceSource(ds *cdiv1.DataSource, last *cdiv1.DataVolumeSourcePVC) {
	if last == nil {
		return
	}
	ds.Spec.Source = cdiv1.DataSourceSource{PVC: last.DeepCopy()}
}

// collectOldImports keeps the cron's importsToKeep most recently used
// imports and deletes the others, DataVolume first, else PVC
// (garbageCollectOldImports, garbageCollectPVCs, deleteDvPvc). Imports are
// the PVCs labelled with the cron's name, ordered by their time of last use
// compared as strings, as CDI compares them. The current import was just
// touched, so it comes first: with importsToKeep 0 even it goes, as in CDI.
// Not simulated: CDI's pass over DataVolumes whose PVCs predate the label.
func (r *dataImportCronReconciler) collectOldImports(ctx context.Context, dic *cdiv1.DataImportCron) error {
	if !collectsGarbage(dic) {
		return nil
	}
	opts := []client.ListOption{client.InNamespace(dic.Namespace), client.MatchingLabels{LabelDataImportCronName: dic.Name}}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.sim.client.List(ctx, pvcs, opts...); err != nil {
		return fmt.Errorf("listing PVCs of DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	dvs := &cdiv1.DataVolumeList{}
	if err := r.sim.client.List(ctx, dvs, opts...); err != nil {
		return fmt.Errorf("listing DataVolumes of DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	lastUse := map[string]string{}
	for i := range pvcs.Items {
		lastUse[pvcs.Items[i].Name] = pvcs.Items[i].Annotations[annLastUseTime]
	}
	for i := range dvs.Items {
		if _, ok := lastUse[dvs.Items[i].Name]; !ok {
			lastUse[dvs.Items[i].Name] = dvs.Items[i].Annotations[annLastUseTime]
		}
	}
	lastUse[dic.Status.CurrentImports[0].DataVolumeName] = lastUseTime(time.Now())
	for _, name := range outdatedImports(lastUse, importsToKeep(dic)) {
		ctrl.LoggerFrom(ctx).V(1).Info("Deleting old DataImportCron import", "name", name)
		if err := r.deleteImport(ctx, dic.Namespace, name); err != nil {
			return err
		}
	}
	return nil
}

// outdatedImports returns the imports beyond the keep most recently used,
// by time of last use compared as strings.
func outdatedImports(lastUse map[string]string, keep int) []string {
	if len(lastUse) <= keep {
		return nil
	}
	names := make([]string, 0, len(lastUse))
	for name := range lastUse {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if lastUse[names[i]] != lastUse[names[j]] {
			return lastUse[names[i]] > lastUse[names[j]]
		}
		return names[i] < names[j]
	})
	return names[keep:]
}

// deleteImport deletes an import's DataVolume, or its PVC when the
// DataVolume is already gone (deleteDvPvc).
func (r *dataImportCronReconciler) deleteImport(ctx context.Context, namespace, name string) error {
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	err := r.sim.client.Delete(ctx, &cdiv1.DataVolume{ObjectMeta: meta})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting DataVolume %s/%s: %w", namespace, name, err)
	}
	if err := r.sim.client.Delete(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: meta}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting PVC %s/%s: %w", namespace, name, err)
	}
	return nil
}

// followStorageClass keeps the cron's imports on its desired storage class
// (update, deleteOutdatedPendingPvc, handleStorageClassChange): the class
// is recorded in the storageClass annotation; a Pending import PVC on
// another class is deleted; when the desired class changes, the import of
// the desired digest is deleted and, once it is gone, the annotation moves,
// and CDI looks again a second later. stop says update goes no further.
func (r *dataImportCronReconciler) followStorageClass(ctx context.Context, dic *cdiv1.DataImportCron,
	pvc *corev1.PersistentVolumeClaim) (ctrl.Result, bool, error) {
	sc, err := r.desiredStorageClass(ctx, dic)
	if err != nil || sc == nil {
		return ctrl.Result{}, err != nil, err
	}
	if pvc != nil && pvc.Status.Phase == corev1.ClaimPending && pvc.Labels[LabelDataImportCronName] == dic.Name &&
		pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != sc.Name {
		if err := r.sim.client.Delete(ctx, pvc); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, true, fmt.Errorf("deleting pending PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
		return ctrl.Result{}, true, nil
	}
	current, ok := dic.Annotations[annCronStorageClass]
	if !ok || current == sc.Name {
		setAnnotation(dic, annCronStorageClass, sc.Name)
		return ctrl.Result{}, false, nil
	}
	if err := r.changeStorageClass(ctx, dic, sc.Name); err != nil {
		return ctrl.Result{}, true, err
	}
	return ctrl.Result{RequeueAfter: storageClassChangeRetry}, true, nil
}

// changeStorageClass deletes the import of the desired digest, waits for
// it to be gone, then records the new class (handleStorageClassChange).
func (r *dataImportCronReconciler) changeStorageClass(ctx context.Context, dic *cdiv1.DataImportCron, sc string) error {
	digest, ok := dic.Annotations[AnnSourceDesiredDigest]
	if !ok {
		return nil
	}
	name, err := importName(dic.Spec.ManagedDataSource, digest)
	if err != nil {
		return fmt.Errorf("naming the import of DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	meta := metav1.ObjectMeta{Namespace: dic.Namespace, Name: name}
	sources := []client.Object{&cdiv1.DataVolume{ObjectMeta: meta}, &corev1.PersistentVolumeClaim{ObjectMeta: meta}}
	for _, obj := range sources {
		if err := r.sim.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s/%s: %w", obj, meta.Namespace, meta.Name, err)
		}
	}
	for _, obj := range sources {
		err := r.sim.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err == nil {
			return fmt.Errorf("waiting for the old import %s/%s to be cleaned up", meta.Namespace, meta.Name)
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("waiting for the old import %s/%s to be cleaned up: %w", meta.Namespace, meta.Name, err)
		}
	}
	patched := dic.DeepCopy()
	setAnnotation(patched, annCronStorageClass, sc)
	if err := r.sim.client.Patch(ctx, patched, client.MergeFrom(dic)); err != nil {
		return fmt.Errorf("patching DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	return nil
}

// desiredStorageClass is the class the cron's imports go to
// (GetStorageClassByNameWithVirtFallback): the one its template names (nil
// if that does not exist), else the default virtualization class (for
// kubevirt content), else the cluster's default.
func (r *dataImportCronReconciler) desiredStorageClass(ctx context.Context, dic *cdiv1.DataImportCron) (*storagev1.StorageClass, error) {
	var name *string
	switch spec := dic.Spec.Template.Spec; {
	case spec.PVC != nil:
		name = spec.PVC.StorageClassName
	case spec.Storage != nil:
		name = spec.Storage.StorageClassName
	}
	return r.sim.storageClassNamed(ctx, name, dic.Spec.Template.Spec.ContentType != cdiv1.DataVolumeArchive)
}
