package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/render"
)

// defaultGracePeriodSeconds is used to stop a VM whose template carries no
// grace period (one not created by macvirt).
const defaultGracePeriodSeconds = 300

// ensureRunState answers: does the VM run as spec.running says? Stopping
// always goes through the stop subresource; starting sets runStrategy back.
func (r *Reconciler) ensureRunState(ctx context.Context, o *machineObservation) (bool, error) {
	vm := o.VM
	halted := isHalted(vm)
	switch {
	case (!wantsRunning(o.Machine) || drainOf(*o).Stop) && !halted:
		return false, r.requestStop(ctx, o)
	case wantsRunning(o.Machine) && halted && o.VMI == nil:
		if r.holdForDomainHook(o) {
			return false, nil
		}
		// Guarded by the resourceVersion: a VM replaced since it was read
		// (perhaps by one the machine does not control) is not patched.
		patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		vm.Spec.RunStrategy = render.RunStrategy(o.Machine)
		vm.Spec.Running = nil // cleared so runStrategy alone decides.
		if err := r.Patch(ctx, vm, patch); err != nil {
			return false, fmt.Errorf("starting VirtualMachine %s: %w", vm.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("started VirtualMachine", "virtualMachine", vm.Name)
	}
	return true, nil
}

// requestStop calls the stop subresource with the VM's own grace period.
// A failure is recorded (Stalled) and returned for backoff; nothing else
// happens to the VM.
func (r *Reconciler) requestStop(ctx context.Context, o *machineObservation) error {
	// The cache may not show a stop this operator requested a moment ago; a
	// second request would be refused by virt-api as a conflict. An uncached
	// read decides.
	fresh := &kubevirtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o.VM), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading VirtualMachine %s before stopping it: %w", o.VM.Name, err)
	}
	freshVMI := &kubevirtv1.VirtualMachineInstance{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o.VM), freshVMI); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading VirtualMachineInstance %s before stopping it: %w", o.VM.Name, err)
		}
		freshVMI = nil
	}
	// The stop goes by name, so what it would reach is checked first: the
	// VM observed (the machine's) and an instance that VM controls. Anything
	// else is observed, and reported, by the next reconcile.
	if fresh.UID != o.VM.UID {
		return fmt.Errorf("VirtualMachine %s/%s was replaced since it was read; not stopping it", o.VM.Namespace, o.VM.Name)
	}
	if freshVMI != nil && !controlledBy(freshVMI, kindVirtualMachine, fresh.UID) {
		return fmt.Errorf("VirtualMachineInstance %s/%s is not controlled by the machine's VirtualMachine; not stopping it", o.VM.Namespace, o.VM.Name)
	}
	if !stopNeeded(fresh, freshVMI) {
		o.VM = fresh
		return nil
	}
	grace := int64(defaultGracePeriodSeconds)
	if t := o.VM.Spec.Template; t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		grace = *t.Spec.TerminationGracePeriodSeconds
	}
	if err := r.Stopper.Stop(ctx, o.VM.Namespace, o.VM.Name, grace); err != nil {
		o.StopError = err
		return fmt.Errorf("stopping VirtualMachine %s/%s: %w", o.VM.Namespace, o.VM.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("requested graceful stop", "virtualMachine", o.VM.Name, "gracePeriodSeconds", grace)
	return nil
}
