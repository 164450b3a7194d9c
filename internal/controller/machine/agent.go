package machine

import (
	"context"
	"errors"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/render"
)

// ensureAgentConfig answers: does the machine have its guest-agent token?
// The endpoint issues it (guestendpoint.IssueToken: a Secret named after the
// token's hash, then the hash recorded on the machine under its
// resourceVersion); a refused write shows in status.
func (r *Reconciler) ensureAgentConfig(ctx context.Context, o *machineObservation) (bool, error) {
	issued, err := guestendpoint.IssueToken(ctx, r.Client, o.Machine, r.Agent)
	var refused *guestendpoint.WriteError
	switch {
	case !errors.As(err, &refused):
		return issued, err
	case refused.Create:
		return false, r.createFailed(o, err)
	}
	return false, r.updateFailed(o, err)
}

// ensureAgentVolume answers: does the VM mount the agent Secret the machine
// records? A token issued again (its hash annotation deleted, to renew a
// machine's config disk) lives in a new Secret, and the VM, otherwise never
// changed after it is created, is pointed at it; the guest reads it from
// its next start. The patch fails if the VM changed since it was read.
func (r *Reconciler) ensureAgentVolume(ctx context.Context, o *machineObservation) (bool, error) {
	vm := o.VM
	if vm.Spec.Template == nil {
		return true, nil
	}
	want := render.AgentSecretName(o.Machine)
	for i, v := range vm.Spec.Template.Spec.Volumes {
		if v.Name != render.AgentConfigVolume || v.Secret == nil || v.Secret.SecretName == want {
			continue
		}
		patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		vm.Spec.Template.Spec.Volumes[i].Secret.SecretName = want
		if err := r.Patch(ctx, vm, patch); err != nil {
			return false, fmt.Errorf("pointing VirtualMachine %s at the agent Secret %s: %w", vm.Name, want, err)
		}
		ctrl.LoggerFrom(ctx).Info("pointed the VirtualMachine at the machine's agent Secret; the guest reads it from its next start",
			"virtualMachine", vm.Name, "secret", want, "previous", v.Secret.SecretName)
	}
	return true, nil
}
