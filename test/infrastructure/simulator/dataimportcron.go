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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

const (
	// AnnSourceDesiredDigest is the annotation on a DataImportCron holding
	// the digest its last successful poll found; an import of any other
	// digest is outdated (CDI's dataimportcron-controller.go).
	AnnSourceDesiredDigest = "cdi.kubevirt.io/storage.import.sourceDesiredDigest"
	// LabelDataImportCronName labels what a DataImportCron creates (its
	// import DataVolumes and their PVCs, its DataSource) with the cron's
	// name (CDI's pkg/common, DataImportCronLabel).
	LabelDataImportCronName = "cdi.kubevirt.io/dataImportCron"
)

// CDI's other annotations and labels around DataImportCrons
// (dataimportcron-controller.go; pkg/common/common.go;
// pkg/controller/common/util.go).
const (
	annNextCronTime             = "cdi.kubevirt.io/storage.import.nextCronTime"
	annLastCronTime             = "cdi.kubevirt.io/storage.import.lastCronTime"
	annLastUseTime              = "cdi.kubevirt.io/storage.import.lastUseTime"
	annCronStorageClass         = "cdi.kubevirt.io/storage.import.storageClass"
	annPodRetainAfterCompletion = "cdi.kubevirt.io/storage.pod.retainAfterCompletion"
	labelDataImportCronCleanup  = LabelDataImportCronName + ".cleanup"
	labelManagedBy              = "app.kubernetes.io/managed-by"
	labelComponent              = "app.kubernetes.io/component"
	cdiControllerName           = "cdi-controller"
)

const (
	// defaultImportsToKeep is CDI's defaultImportsToKeepPerCron.
	defaultImportsToKeep = 3
	// storageClassChangeRetry is how soon CDI looks again after starting
	// over on a new storage class (update: RequeueAfter 1 s).
	storageClassChangeRetry = time.Second
	// reasonDataSourceAlreadyManaged is CDI's event when a cron's DataSource
	// belongs to another cron (ErrDataSourceAlreadyManaged).
	reasonDataSourceAlreadyManaged = "ErrDataSourceAlreadyManaged"
	msgDataSourceAlreadyManaged    = "DataSource %s is already managed by DataImportCron %s"
)

// dataImportCronReconciler plays CDI's DataImportCron controller
// (pkg/controller/dataimportcron-controller.go) with the poller of its
// CronJobs (dataimportcron_poll.go): it imports each new digest of a cron's
// image into a DataVolume, points the cron's DataSource at the latest
// import, and deletes old imports.
type dataImportCronReconciler struct {
	sim *Simulator
	// recorder records CDI's events on DataImportCrons.
	recorder events.EventRecorder
}

func (r *dataImportCronReconciler) setup(mgr ctrl.Manager) error {
	r.recorder = mgr.GetEventRecorder("dataimportcron-controller")
	// CDI's watches (addDataImportCronControllerWatches): updates and
	// deletions of the DataVolumes and DataSources a cron labelled, and
	// deletions of its PVCs, bring the cron back.
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-dataimportcron").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&cdiv1.DataImportCron{}).
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(cronOf), builder.WithPredicates(cronLabelled(true))).
		Watches(&cdiv1.DataSource{}, handler.EnqueueRequestsFromMapFunc(cronOf), builder.WithPredicates(cronLabelled(true))).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(cronOf), builder.WithPredicates(cronLabelled(false))).
		WatchesRawSource(source.Channel(r.sim.crons.channel(), &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up DataImportCron simulator: %w", err)
	}
	return nil
}

// cronOf maps an object a cron labelled to the cron (mapSourceObjectToCron).
func cronOf(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[LabelDataImportCronName]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// cronLabelled passes deletions, and updates when updates is set, of
// objects labelled with a cron's name; never creations.
func cronLabelled(updates bool) predicate.Funcs {
	labelled := func(obj client.Object) bool { return obj.GetLabels()[LabelDataImportCronName] != "" }
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return updates && labelled(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return labelled(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile follows CDI's Reconcile: a cron that is gone (CDI adds no
// finalizer) has the objects it labelled for clean-up deleted; a cron whose
// DataSource another cron manages is left alone; otherwise the CronJob's
// poller runs when due, then update brings imports, status and DataSource
// in line.
func (r *dataImportCronReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dic := &cdiv1.DataImportCron{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, dic); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting DataImportCron %s: %w", req.NamespacedName, err)
		}
		r.sim.crons.forget(req.NamespacedName)
		return ctrl.Result{}, r.cleanup(ctx, req.NamespacedName)
	}
	if dic.DeletionTimestamp != nil {
		return ctrl.Result{}, r.cleanup(ctx, req.NamespacedName)
	}
	if ok, err := r.managesDataSource(ctx, dic); !ok || err != nil {
		return ctrl.Result{}, err
	}
	wrote, wait, err := r.runPoller(ctx, dic)
	if wrote || err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.update(ctx, dic)
	if err == nil && wait > 0 && (res.RequeueAfter == 0 || wait < res.RequeueAfter) {
		res.RequeueAfter = wait
	}
	return res, err
}

// managesDataSource is CDI's shouldReconcileCron: false, with a Warning
// event, when the cron's DataSource carries the name of another cron that
// exists and manages a DataSource of that name.
func (r *dataImportCronReconciler) managesDataSource(ctx context.Context, dic *cdiv1.DataImportCron) (bool, error) {
	ds := &cdiv1.DataSource{}
	key := types.NamespacedName{Namespace: dic.Namespace, Name: dic.Spec.ManagedDataSource}
	if err := r.sim.client.Get(ctx, key, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("getting DataSource %s: %w", key, err)
	}
	owner := ds.Labels[LabelDataImportCronName]
	if owner == "" || owner == dic.Name {
		return true, nil
	}
	other := &cdiv1.DataImportCron{}
	if err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: dic.Namespace, Name: owner}, other); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("getting DataImportCron %s/%s: %w", dic.Namespace, owner, err)
	}
	if other.Spec.ManagedDataSource != ds.Name {
		return true, nil
	}
	r.recorder.Eventf(dic, nil, corev1.EventTypeWarning, reasonDataSourceAlreadyManaged, "Reconcile",
		msgDataSourceAlreadyManaged, ds.Name, other.Name)
	return false, nil
}

// update is CDI's update, in its order: look at the current import, note
// its success (and collect old imports), point the DataSource at the last
// import, poll a node-pull source, start an import of a new digest, and
// write the cron once if anything changed.
func (r *dataImportCronReconciler) update(ctx context.Context, dic *cdiv1.DataImportCron) (ctrl.Result, error) {
	dv, pvc, err := r.importState(ctx, dic)
	if err != nil {
		return ctrl.Result{}, err
	}
	orig := dic.DeepCopy()
	if res, stop, err := r.followStorageClass(ctx, dic, pvc); stop || err != nil {
		return res, err
	}
	succeeded, imports, err := r.observeImport(ctx, dic, dv, pvc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if succeeded {
		noteImported(dic)
		setCronCondition(&dic.Status, cdiv1.DataImportCronProgressing, corev1.ConditionFalse, msgCronNoImport, reasonCronNoImport)
		if err := r.collectOldImports(ctx, dic); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.updateDataSource(ctx, dic); err != nil {
		return ctrl.Result{}, err
	}
	var res ctrl.Result
	if isNodePull(dic) && isRegistryURLSource(dic) && dic.Spec.Schedule != "" {
		wait, err := r.pollInController(dic)
		if err != nil {
			return ctrl.Result{}, err
		}
		res.RequeueAfter = wait
	}
	if err := r.followDigest(ctx, dic, imports, dv, succeeded); err != nil {
		return ctrl.Result{}, err
	}
	if err := setLastExecution(dic); err != nil {
		return ctrl.Result{}, err
	}
	if equality.Semantic.DeepEqual(dic, orig) {
		return res, nil
	}
	// The DataImportCron CRD has no status subresource: CDI updates the
	// whole object.
	if err := r.sim.client.Update(ctx, dic); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	return res, nil
}

// importState returns the DataVolume and the PVC of the cron's current
// import, each nil when missing (getImportState).
func (r *dataImportCronReconciler) importState(ctx context.Context, dic *cdiv1.DataImportCron) (*cdiv1.DataVolume, *corev1.PersistentVolumeClaim, error) {
	if len(dic.Status.CurrentImports) == 0 {
		return nil, nil, nil
	}
	key := types.NamespacedName{Namespace: dic.Namespace, Name: dic.Status.CurrentImports[0].DataVolumeName}
	dv := &cdiv1.DataVolume{}
	if err := r.sim.client.Get(ctx, key, dv); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("getting DataVolume %s: %w", key, err)
		}
		dv = nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, key, pvc); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("getting PVC %s: %w", key, err)
		}
		pvc = nil
	}
	return dv, pvc, nil
}

// observeImport is the first half of CDI's update: a current import that
// Succeeded (or whose PVC is Bound without a DataVolume) is used, its PVC
// touched; one still running sets Progressing from its phase; one that is
// gone is dropped from status.currentImports. It returns whether the import
// succeeded and the imports as they stand for the digest check.
func (r *dataImportCronReconciler) observeImport(ctx context.Context, dic *cdiv1.DataImportCron,
	dv *cdiv1.DataVolume, pvc *corev1.PersistentVolumeClaim) (bool, []cdiv1.ImportStatus, error) {
	imports := dic.Status.CurrentImports
	switch {
	case dv != nil && dv.Status.Phase == cdiv1.Succeeded,
		dv == nil && pvc != nil && pvc.Status.Phase == corev1.ClaimBound:
		if pvc != nil {
			if err := r.touchImport(ctx, dic, pvc); err != nil {
				return false, imports, err
			}
		}
		return true, imports, nil
	case dv != nil:
		status, msg, reason := cronProgressOf(dv.Status.Phase)
		setCronCondition(&dic.Status, cdiv1.DataImportCronProgressing, status, msg, reason)
	default:
		if len(imports) > 0 {
			imports = imports[1:]
			dic.Status.CurrentImports = imports
		}
		setCronCondition(&dic.Status, cdiv1.DataImportCronProgressing, corev1.ConditionFalse, msgCronNoImport, reasonCronNoImport)
	}
	return false, imports, nil
}

// noteImported records the current import as the last imported PVC, with
// the time, when it is a new one (updateDataImportCronOnSuccess).
func noteImported(dic *cdiv1.DataImportCron) {
	last := cdiv1.DataVolumeSourcePVC{Namespace: dic.Namespace, Name: dic.Status.CurrentImports[0].DataVolumeName}
	if p := dic.Status.LastImportedPVC; p != nil && *p == last {
		return
	}
	now := metav1.Now()
	dic.Status.LastImportedPVC, dic.Status.LastImportTimestamp = &last, &now
}

// followDigest is the second half of CDI's update: a desired digest other
// than the current import's makes the cron Outdated, deletes a failing
// import and, once the current import is done (or there is none), starts
// an import of the new digest; otherwise UpToDate follows the import.
func (r *dataImportCronReconciler) followDigest(ctx context.Context, dic *cdiv1.DataImportCron,
	imports []cdiv1.ImportStatus, dv *cdiv1.DataVolume, succeeded bool) error {
	desired := dic.Annotations[AnnSourceDesiredDigest]
	switch {
	case desired != "" && (len(imports) == 0 || desired != imports[0].Digest):
		setCronCondition(&dic.Status, cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, msgCronOutdated, reasonCronOutdated)
		if dv != nil {
			if err := r.deleteFailedImport(ctx, dic, dv); err != nil {
				return err
			}
		}
		if succeeded || len(imports) == 0 {
			return r.startImport(ctx, dic, desired)
		}
	case succeeded:
		// The snapshot source format is not simulated: always pvc.
		dic.Status.SourceFormat = ptr.To(cdiv1.DataImportCronSourceFormatPvc)
		setCronCondition(&dic.Status, cdiv1.DataImportCronUpToDate, corev1.ConditionTrue, msgCronUpToDate, reasonCronUpToDate)
	case len(imports) > 0:
		setCronCondition(&dic.Status, cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, msgCronInProgress, reasonCronInProgress)
	default:
		setCronCondition(&dic.Status, cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, msgCronNoDigest, reasonCronNoDigest)
	}
	return nil
}

// setLastExecution copies the time of the last successful poll, from the
// lastCronTime annotation, into status.lastExecutionTimestamp
// (updateLastExecutionTimestamp).
func setLastExecution(dic *cdiv1.DataImportCron) error {
	s := dic.Annotations[annLastCronTime]
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("parsing %s of DataImportCron %s/%s: %w", annLastCronTime, dic.Namespace, dic.Name, err)
	}
	if ts := dic.Status.LastExecutionTimestamp; ts == nil || !ts.Time.Equal(t) {
		dic.Status.LastExecutionTimestamp = &metav1.Time{Time: t}
	}
	return nil
}

// cleanup deletes the DataSources, DataVolumes and PVCs of a deleted cron
// that carry its clean-up label, given them under retentionPolicy None
// (cleanup). Under the default, retentionPolicy All, everything stays.
func (r *dataImportCronReconciler) cleanup(ctx context.Context, key types.NamespacedName) error {
	opts := []client.DeleteAllOfOption{
		client.InNamespace(key.Namespace),
		client.MatchingLabels{LabelDataImportCronName: key.Name, labelDataImportCronCleanup: "true"},
	}
	for _, obj := range []client.Object{&cdiv1.DataSource{}, &cdiv1.DataVolume{}, &corev1.PersistentVolumeClaim{}} {
		if err := r.sim.client.DeleteAllOf(ctx, obj, opts...); err != nil {
			return fmt.Errorf("deleting the %T objects of DataImportCron %s: %w", obj, key, err)
		}
	}
	return nil
}
