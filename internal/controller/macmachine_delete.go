package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// reconcileDelete follows the APFS rule: request a graceful stop, wait until
// the VMI is gone, only then delete the VM and DataVolumes, and remove the
// finalizer once they are gone. If the stop request fails, nothing is
// deleted: graceful stop never degrades into deletion.
func (r *MacMachineReconciler) reconcileDelete(ctx context.Context, o *machineObservation) (ctrl.Result, error) {
	m := o.Machine
	if !controllerutil.ContainsFinalizer(m, macvirtv1alpha1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	vm, vmi, err := r.observeVM(ctx, m)
	if err != nil {
		return ctrl.Result{}, err
	}
	o.VM, o.VMI = vm, vmi
	if vm != nil && !isHalted(vm) {
		o.DeletionStep = "requesting a graceful stop"
		if err := r.requestStop(ctx, o); err != nil {
			o.DeletionStep = "graceful stop failed; the VM is kept until it can be stopped"
			return ctrl.Result{}, err
		}
	}
	if vmi != nil {
		// The VMI's deletion (a watch event) brings the next step.
		o.DeletionStep = "waiting for macOS to shut down"
		return ctrl.Result{}, nil
	}
	remaining, err := r.deleteOwned(ctx, m, vm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		o.DeletionStep = fmt.Sprintf("waiting for %d VirtualMachine/DataVolume objects to be deleted", remaining)
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, macvirtv1alpha1.MachineFinalizer)
	if err := r.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("machine deleted after graceful stop")
	o.DeletionStep = "done"
	return ctrl.Result{}, nil
}

// deleteOwned deletes the machine's VM (as already observed) and the
// DataVolumes that still exist, and returns how many existed.
func (r *MacMachineReconciler) deleteOwned(ctx context.Context, m *macvirtv1alpha1.MacMachine, vm *kubevirtv1.VirtualMachine) (int, error) {
	remaining := 0
	objs := []client.Object{}
	if vm != nil {
		objs = append(objs, vm)
	}
	for _, name := range render.DataVolumeNames(m) {
		dv := &cdiv1.DataVolume{}
		if err := getOptional(ctx, r.Client, types.NamespacedName{Namespace: m.Namespace, Name: name}, dv); err != nil {
			return 0, err
		}
		if dv.Name != "" {
			objs = append(objs, dv)
		}
	}
	for _, obj := range objs {
		remaining++
		if !obj.GetDeletionTimestamp().IsZero() {
			continue
		}
		if err := r.Delete(ctx, obj, client.Preconditions{UID: ptrUID(obj)}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("deleting %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return remaining, nil
}
