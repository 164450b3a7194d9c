package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// reconcileDelete follows the APFS rule: request a graceful stop, wait until
// the VMI is gone, only then delete the VM and DataVolumes, and remove the
// finalizer once they are gone. If the stop request fails, nothing is
// deleted: graceful stop never degrades into deletion. Only what the machine
// controls is stopped and deleted; anything else under its names is left as
// it is, and said so (Foreign), and does not hold the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, o *machineObservation) (ctrl.Result, error) {
	m := o.Machine
	if !controllerutil.ContainsFinalizer(m, macvirtv1alpha1.MachineFinalizer) {
		return ctrl.Result{}, nil
	}
	if m.Spec.HostName != "" {
		return r.reconcileDeleteHosted(ctx, o)
	}
	if err := r.observeOwned(ctx, o); err != nil {
		return ctrl.Result{}, err
	}
	vm, vmi := o.VM, o.VMI
	if vm != nil && o.strayInstance {
		// A stop or a deletion of the VM could reach the instance of its
		// name, which is not the VM's: both wait until it is gone.
		o.DeletionStep = fmt.Sprintf("VirtualMachine %s/%s is neither stopped nor deleted while VirtualMachineInstance %s/%s, which it does not control, exists: delete that instance",
			vm.Namespace, vm.Name, vm.Namespace, vm.Name)
		return ctrl.Result{}, nil
	}
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
	remaining, err := r.deleteOwned(ctx, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	if remaining > 0 {
		o.DeletionStep = fmt.Sprintf("waiting for %d VirtualMachine/DataVolume objects to be deleted", remaining)
		return ctrl.Result{}, nil
	}
	if _, err := base.RemoveFinalizer(ctx, r.Client, m, macvirtv1alpha1.MachineFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("machine deleted after graceful stop", "leftAlone", o.Foreign)
	o.DeletionStep = "done"
	return ctrl.Result{}, nil
}

// deleteOwned deletes the machine's VM and DataVolumes, as observed (only
// those it controls), and returns how many existed. Each delete is pinned to
// the UID observed, so an object replaced since is not deleted.
func (r *Reconciler) deleteOwned(ctx context.Context, o *machineObservation) (int, error) {
	remaining := 0
	objs := []client.Object{}
	if o.VM != nil {
		objs = append(objs, o.VM)
	}
	for _, dv := range o.DataVolumes {
		if dv != nil {
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

func ptrUID(obj client.Object) *types.UID {
	uid := obj.GetUID()
	return &uid
}
