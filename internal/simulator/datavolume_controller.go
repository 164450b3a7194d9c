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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
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
	// recorder records CDI's events on DataVolumes (CloneWithoutSource).
	recorder events.EventRecorder
}

func (r *dataVolumeReconciler) setup(mgr ctrl.Manager) error {
	r.recorder = mgr.GetEventRecorder("datavolume-controller")
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-datavolume").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&cdiv1.DataVolume{}).
		WatchesRawSource(source.Channel(r.sim.dataVolumeEvents, &handler.EnqueueRequestForObject{})).
		// A VirtualMachine that starts is the first consumer a
		// WaitForFirstConsumer DataVolume waits for.
		Watches(&kubevirtv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(dataVolumesOfVM)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up DataVolume simulator: %w", err)
	}
	return nil
}

// Reconcile moves one DataVolume one step forward once it has spent
// StepInterval in its current step. The status write triggers the next
// reconcile, which starts the clock of the following step.
func (r *dataVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	key := pacerKey("DataVolume", req.NamespacedName)
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
		return ctrl.Result{}, nil
	}
	if dv.Status.Phase != cdiv1.PhaseUnset {
		state := fmt.Sprintf("%s/%s/%d", dv.Status.Phase, dv.Status.Progress, dv.Status.RestartCount)
		interval := r.sim.opts.StepInterval
		if dv.Status.RestartCount > 0 {
			interval = restartBackoff(interval, dv.Status.RestartCount)
		}
		if wait := r.sim.pacer.wait(key, dv.UID, state, interval); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if held, err := r.holdForSource(ctx, dv); held || err != nil {
		// CDI watches DataSources and PVCs; the simulator looks again.
		return ctrl.Result{RequeueAfter: r.sim.opts.StepInterval}, err
	}
	f := r.sim.dataVolumeFaults(dv.Namespace, dv.Name)
	wffc, err := r.waitsForConsumer(ctx, dv)
	if err != nil {
		return ctrl.Result{}, err
	}
	f.waitForConsumer, f.cloneStrategy = wffc, r.sim.opts.CloneStrategy
	next, ok := r.sim.nextDataVolumeTick(dv, f)
	if !ok {
		return ctrl.Result{}, nil
	}
	dv.Status = next
	if err := r.sim.client.Status().Update(ctx, dv); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status of DataVolume %s: %w", req.NamespacedName, err)
	}
	log.V(1).Info("DataVolume stepped", "phase", next.Phase, "progress", next.Progress)
	return ctrl.Result{}, nil
}

// dataVolumeDone reports the phases the simulator never leaves (it no
// longer produces Failed, which CDI keeps for a lost claim).
func dataVolumeDone(phase cdiv1.DataVolumePhase) bool {
	return phase == cdiv1.Succeeded || phase == cdiv1.Failed
}
