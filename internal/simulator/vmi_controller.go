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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// startPhases is the number of phases an instance passes through before
// Running (Pending, Scheduling, Scheduled); StartDelay is spread over them.
const startPhases = 3

// vmiReconciler plays virt-controller's instance controller, the scheduler
// and virt-handler: it schedules and boots instances, shuts deleted ones
// down, and deletes instances whose VirtualMachine is gone (envtest has no
// garbage collector).
type vmiReconciler struct {
	sim *Simulator
}

func (r *vmiReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-virtualmachineinstance").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&kubevirtv1.VirtualMachineInstance{}).
		Watches(&kubevirtv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(sameName)).
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.instancesUsingDataVolume)).
		WatchesRawSource(source.Channel(r.sim.vmiEvents, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up VirtualMachineInstance simulator: %w", err)
	}
	return nil
}

// sameName maps a VirtualMachine to its instance, which shares its name.
func sameName(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
}

// Reconcile advances one instance by at most one phase.
func (r *vmiReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := pacerKey("VirtualMachineInstance", req.NamespacedName)
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			r.sim.pacer.forget(key)
			r.sim.syncGuest(req.NamespacedName, nil)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting VirtualMachineInstance %s: %w", req.NamespacedName, err)
	}
	r.sim.syncGuest(req.NamespacedName, vmi)
	orphan, err := r.orphaned(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case orphan && vmi.DeletionTimestamp == nil:
		ctrl.LoggerFrom(ctx).Info("Deleting VirtualMachineInstance whose VirtualMachine is gone")
		return ctrl.Result{}, r.sim.deleteVMI(ctx, vmi)
	case vmi.DeletionTimestamp != nil:
		return r.shutdown(ctx, key, vmi)
	case vmi.IsFinal():
		r.sim.pacer.forget(key)
		return ctrl.Result{}, nil
	}
	return r.advance(ctx, key, vmi)
}

// orphaned reports an instance controlled by a VirtualMachine that no
// longer exists.
func (r *vmiReconciler) orphaned(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != kubevirtv1.VirtualMachineGroupVersionKind.Kind {
		return false, nil
	}
	vm := &kubevirtv1.VirtualMachine{}
	err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: ref.Name}, vm)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting VirtualMachine %s/%s: %w", vmi.Namespace, ref.Name, err)
	}
	return vm.UID != ref.UID, nil
}

// advance moves a live instance to its next phase once it has spent its
// share of StartDelay in the current one.
func (r *vmiReconciler) advance(ctx context.Context, key string, vmi *kubevirtv1.VirtualMachineInstance) (ctrl.Result, error) {
	f := r.sim.faultsOf(client.ObjectKeyFromObject(vmi))
	phase := vmi.Status.Phase
	if phase == kubevirtv1.Pending {
		if held, err := r.sim.holdForDataVolumes(ctx, vmi); held || err != nil {
			return ctrl.Result{}, err
		}
	}
	timed := phase == kubevirtv1.Pending || phase == kubevirtv1.Scheduled ||
		(phase == kubevirtv1.Scheduling && !f.unschedulable)
	if timed {
		step := r.sim.opts.StartDelay / startPhases
		if wait := r.sim.pacer.wait(key, vmi.UID, pacerState(vmi), step); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	where := placement{Node: r.sim.opts.NodeName}
	if phase == kubevirtv1.Scheduling && !f.unschedulable && !f.imagePull {
		var err error
		if where, err = r.sim.place(ctx, vmi); err != nil {
			return ctrl.Result{}, err
		}
	}
	// An unscheduled pod is tried again, as kube-scheduler retries it when
	// nodes or pods change.
	var retry ctrl.Result
	if where.Node == "" {
		retry.RequeueAfter = r.sim.opts.StartDelay
	}
	if !stepVMI(vmi, f, where, time.Now()) {
		return retry, nil
	}
	// The instance CRD has no status subresource: one update writes all.
	if err := r.sim.client.Update(ctx, vmi); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("VirtualMachineInstance stepped", "phase", vmi.Status.Phase)
	if f.nodeLost && vmi.Status.Phase == kubevirtv1.Failed {
		r.sim.Clear(Fault{Kind: NodeLost, Namespace: vmi.Namespace, Name: vmi.Name})
	}
	return retry, nil
}

// shutdown plays the ACPI power-off of a deleted instance in two writes, as
// virt-handler and virt-controller make them: after the shutdown delay the
// guest is off (phase Succeeded, or Failed when it was killed: see
// powerOff); then the finalizer goes, letting the API server remove the
// instance, a killed one's after killedPodHold.
func (r *vmiReconciler) shutdown(ctx context.Context, key string, vmi *kubevirtv1.VirtualMachineInstance) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(vmi, kubevirtv1.VirtualMachineInstanceFinalizer) {
		return ctrl.Result{}, nil
	}
	if !vmi.IsFinal() {
		delay, off := r.sim.powerOff(vmi)
		if wait := r.sim.pacer.wait(key, vmi.UID, "ShuttingDown", delay); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		setVMIPhase(vmi, off, time.Now())
		if err := r.sim.client.Update(ctx, vmi); err != nil {
			return ctrl.Result{}, fmt.Errorf("powering off VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("VirtualMachineInstance powered off", "phase", off)
		return ctrl.Result{}, nil
	}
	if wait := r.sim.killedWait(key, vmi); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	controllerutil.RemoveFinalizer(vmi, kubevirtv1.VirtualMachineInstanceFinalizer)
	if err := r.sim.client.Update(ctx, vmi); err != nil {
		return ctrl.Result{}, fmt.Errorf("releasing VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	r.sim.pacer.forget(key)
	return ctrl.Result{}, nil
}

// shutdownDelay is ShutdownDelay, cut short by a smaller termination grace
// period, after which virt-handler would kill the guest.
func (s *Simulator) shutdownDelay(vmi *kubevirtv1.VirtualMachineInstance) time.Duration {
	d := s.opts.ShutdownDelay
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		d = min(d, time.Duration(*g)*time.Second)
	}
	return d
}

// deleteVMI starts the graceful stop of an instance.
func (s *Simulator) deleteVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	err := s.client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// getVMI returns the named instance, or nil when there is none.
func (s *Simulator) getVMI(ctx context.Context, name types.NamespacedName) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, name, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting VirtualMachineInstance %s: %w", name, err)
	}
	return vmi, nil
}
