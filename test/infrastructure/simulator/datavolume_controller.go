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

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// dataVolumeReconciler plays CDI's DataVolume controllers: it walks each
// DataVolume through the import or clone phases, one step per StepInterval.
type dataVolumeReconciler struct {
	sim *Simulator
	// recorder records CDI's events on DataVolumes and their PVCs.
	recorder events.EventRecorder
	// inUse remembers the clones told that their source is in use.
	inUse reportOnce
}

func (r *dataVolumeReconciler) setup(mgr ctrl.Manager) error {
	r.recorder = mgr.GetEventRecorder("datavolume-controller")
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-datavolume").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&cdiv1.DataVolume{}).
		WatchesRawSource(source.Channel(r.sim.dataVolumeEvents, &handler.EnqueueRequestForObject{})).
		// A node selected for its PVC (a first consumer scheduled) lets
		// a WaitForFirstConsumer DataVolume go on; the PVC has its name.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(sameName)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up DataVolume simulator: %w", err)
	}
	return nil
}

// Reconcile moves one DataVolume one step forward once it has spent its
// current step's time (StepInterval, or its share of a clone's duration).
// The status write triggers the next reconcile, which starts the clock of
// the following step. Like CDI it first creates the DataVolume's PVC, and
// binds it once the DataVolume is bound, as a provisioner would.
func (r *dataVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	key := pacerKey("DataVolume", req.NamespacedName)
	again := ctrl.Result{RequeueAfter: r.sim.opts.StepInterval}
	dv := &cdiv1.DataVolume{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, dv); err != nil {
		if apierrors.IsNotFound(err) {
			r.sim.pacer.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting DataVolume %s: %w", req.NamespacedName, err)
	}
	if dv.DeletionTimestamp != nil || dataVolumeDone(dv.Status.Phase) {
		r.sim.pacer.forget(key)
		r.inUse.forget(dv.UID)
		return ctrl.Result{}, nil
	}
	src, resolved, err := r.cloneSourceOf(ctx, dv)
	if err != nil || !resolved {
		// CDI watches DataSources; the simulator looks again.
		return again, err
	}
	st, err := r.storageOf(ctx, dv, src)
	if err != nil {
		return ctrl.Result{}, err
	}
	if dv.Status.Phase != cdiv1.PhaseUnset {
		state := fmt.Sprintf("%s/%s/%d", dv.Status.Phase, dv.Status.Progress, dv.Status.RestartCount)
		interval := r.sim.dataVolumeStep(dv, st.clone.plan, st.copyBytes, r.sim.importSteps(dv))
		if dv.Status.RestartCount > 0 {
			interval = restartBackoff(r.sim.opts.StepInterval, dv.Status.RestartCount)
		}
		if wait := r.sim.pacer.wait(key, dv.UID, state, interval); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if st.claim == nil {
		// CDI validates the source before it creates the PVC, and
		// watches sources and profiles; the simulator looks again.
		if held, err := r.holdForSource(ctx, dv, src); held || err != nil {
			return again, err
		}
		if st.notReady != "" {
			log.V(1).Info("DataVolume waits", "reason", st.notReady)
			return again, nil
		}
	}
	f, err := r.prepare(ctx, dv, st, src)
	if errors.Is(err, errHeld) {
		return again, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	next, ok := r.sim.nextDataVolumeTick(dv, f)
	if !ok {
		if f.waitForSource {
			return again, nil
		}
		return ctrl.Result{}, nil
	}
	if err := r.applyStorage(ctx, dv, next, st, src); err != nil {
		return ctrl.Result{}, err
	}
	old := dv.Status
	dv.Status = next
	if err := r.sim.client.Status().Update(ctx, dv); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status of DataVolume %s: %w", req.NamespacedName, err)
	}
	r.recordEvents(dv, old, src)
	log.V(1).Info("DataVolume stepped", "phase", next.Phase, "progress", next.Progress)
	return ctrl.Result{}, nil
}

// prepare gathers what holds the DataVolume's next step back (faults, a
// first consumer, its source) and makes sure its PVC exists, unless a
// quota refuses it; errHeld when the PVC is in the way.
func (r *dataVolumeReconciler) prepare(ctx context.Context, dv *cdiv1.DataVolume, st *dvStorage, src *cloneSource) (dvFaults, error) {
	f := r.sim.dataVolumeFaults(dv.Namespace, dv.Name)
	var err error
	if f.waitForConsumer, err = r.waitsForConsumer(ctx, dv); err != nil {
		return f, err
	}
	f.clone = st.clone.plan
	if !f.quota {
		if err := r.ensureClaim(ctx, dv, st, src); err != nil {
			return f, err
		}
	}
	ready, err := r.sourceReady(ctx, dv, src, st.claim)
	f.waitForSource = !ready
	return f, err
}

// bindsOnFirstConsumer reports a storage class of volume binding mode
// WaitForFirstConsumer.
func bindsOnFirstConsumer(sc *storagev1.StorageClass) bool {
	return sc != nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// applyStorage makes the storage match the DataVolume's next status before
// it is written: its PVC bound once the DataVolume is, and populated once
// it Succeeded.
func (r *dataVolumeReconciler) applyStorage(ctx context.Context, dv *cdiv1.DataVolume, next cdiv1.DataVolumeStatus,
	st *dvStorage, src *cloneSource) error {
	if st.claim == nil {
		return nil
	}
	switch next.Phase {
	case cdiv1.PhaseUnset, cdiv1.Pending, cdiv1.PendingPopulation:
		return nil
	}
	provisioner := ""
	if st.class != nil {
		provisioner = st.class.Provisioner
	}
	if _, immediate := dv.Annotations[AnnImmediateBinding]; !immediate && next.Phase != cdiv1.Succeeded && bindsOnFirstConsumer(st.class) {
		// CDI populates such a PVC through a prime PVC on the selected
		// node and binds the volume to it only once populated
		// (pkg/controller/populators/import-populator.go,
		// reconcileTargetPVC: cc.Rebind once the import succeeded): a pod
		// that uses it is not bound to its node before.
		return nil
	}
	if err := r.sim.bindClaim(ctx, st.claim, provisioner); err != nil {
		return err
	}
	if next.Phase == cdiv1.Succeeded {
		if err := r.populate(dv, st.claim, src); err != nil {
			return fmt.Errorf("populating PVC %s/%s: %w", st.claim.Namespace, st.claim.Name, err)
		}
	}
	return nil
}

// dataVolumeDone reports the phases the simulator never leaves (it no
// longer produces Failed, which CDI keeps for a lost claim).
func dataVolumeDone(phase cdiv1.DataVolumePhase) bool {
	return phase == cdiv1.Succeeded || phase == cdiv1.Failed
}
