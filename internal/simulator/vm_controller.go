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
	"maps"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// vmReconciler plays virt-controller's VirtualMachine controller: it starts
// and stops instances according to the run strategy, waits for DataVolumes,
// backs off crash loops and writes the VirtualMachine status.
type vmReconciler struct {
	sim *Simulator
}

func (r *vmReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-virtualmachine").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&kubevirtv1.VirtualMachine{}).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(vmOfInstance)).
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsingDataVolume)).
		WatchesRawSource(source.Channel(r.sim.vmEvents, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up VirtualMachine simulator: %w", err)
	}
	return nil
}

// vmOfInstance maps an instance to the VirtualMachine controlling it, or to
// the VirtualMachine of the same name.
func vmOfInstance(_ context.Context, obj client.Object) []reconcile.Request {
	key := client.ObjectKeyFromObject(obj)
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kubevirtv1.VirtualMachineGroupVersionKind.Kind {
		key.Name = ref.Name
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// Reconcile acts on the instance as the run strategy calls for, then writes
// the status computed from the instance it saw (so a failed start is still
// counted although its instance was just deleted); the resulting events
// bring the next reconcile.
func (r *vmReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting VirtualMachine %s: %w", req.NamespacedName, err)
	}
	vmi, err := r.sim.getVMI(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	if vm.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, vm, vmi)
	}
	if err := r.ensureFinalizer(ctx, vm); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureTemplateDataVolumes(ctx, vm); err != nil {
		return ctrl.Result{}, err
	}
	dvs, err := r.dataVolumesOf(ctx, vm)
	if err != nil {
		return ctrl.Result{}, err
	}
	view := vmView{vm: vm, vmi: vmi, dvs: dvs, now: time.Now(), backoff: r.sim.opts.CrashLoopBackoff, jitter: r.sim.jitter.upTo}
	action, requeue := decideVM(view)
	if action == actCreate {
		// virt-api refuses the instance: no create, a Failure condition, and
		// a retry later (pkg/virt-controller/watch/vm/vm.go, startVMI).
		if view.refusal = r.sim.instanceRefusal(vm); view.refusal != "" {
			action, requeue = actNone, r.sim.opts.CrashLoopBackoff
		}
	}
	// pkg/virt-controller/watch/vm/vm.go (execute): sync acts on the
	// instance first, then updateStatus writes the status computed from the
	// instance observed before the action. An observer may thus see a new
	// instance while the VirtualMachine still says Stopped, or a deleted one
	// while it still says Running.
	if err := r.act(ctx, vm, vmi, action); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, vm, computeVMStatus(view, action, action == actCreate || view.refusal != "")); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// act carries out the chosen action on the instance.
func (r *vmReconciler) act(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, action vmAction) error {
	log := ctrl.LoggerFrom(ctx)
	switch action {
	case actCreate:
		err := r.sim.client.Create(ctx, newVMI(vm))
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating VirtualMachineInstance %s/%s: %w", vm.Namespace, vm.Name, err)
		}
		log.Info("Created VirtualMachineInstance")
	case actDelete:
		if err := r.sim.deleteVMI(ctx, vmi); err != nil {
			return err
		}
		log.Info("Stopping VirtualMachineInstance", "phase", vmi.Status.Phase)
	}
	return nil
}

// finalize stops the instance of a VirtualMachine being deleted and releases
// the VirtualMachine once the instance is gone.
func (r *vmReconciler) finalize(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) error {
	view := vmView{vm: vm, vmi: vmi, now: time.Now(), backoff: r.sim.opts.CrashLoopBackoff, jitter: r.sim.jitter.upTo}
	if err := r.writeStatus(ctx, vm, computeVMStatus(view, actNone, false)); err != nil {
		return err
	}
	if vmi != nil {
		if vmi.DeletionTimestamp != nil {
			return nil
		}
		return r.sim.deleteVMI(ctx, vmi)
	}
	if !controllerutil.RemoveFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		return nil
	}
	if err := r.sim.client.Update(ctx, vm); err != nil {
		return fmt.Errorf("removing finalizer from VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// ensureFinalizer adds virt-controller's finalizer, which holds a deleted
// VirtualMachine until its instance has shut down.
func (r *vmReconciler) ensureFinalizer(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	if !controllerutil.AddFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		return nil
	}
	if err := r.sim.client.Update(ctx, vm); err != nil {
		return fmt.Errorf("adding finalizer to VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// writeStatus writes st through the status subresource if it differs.
func (r *vmReconciler) writeStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, st kubevirtv1.VirtualMachineStatus) error {
	if equality.Semantic.DeepEqual(vm.Status, st) {
		return nil
	}
	vm.Status = st
	if err := r.sim.client.Status().Update(ctx, vm); err != nil {
		return fmt.Errorf("updating status of VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("VirtualMachine status", "printableStatus", st.PrintableStatus)
	return nil
}

// newVMI builds the instance virt-controller creates from the template.
func newVMI(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
	tmpl := vm.Spec.Template
	annotations := maps.Clone(tmpl.ObjectMeta.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[kubevirtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name,
			Namespace:       vm.Namespace,
			Labels:          maps.Clone(tmpl.ObjectMeta.Labels),
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			Finalizers:      []string{kubevirtv1.VirtualMachineInstanceFinalizer},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
}
