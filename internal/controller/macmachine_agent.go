package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/agentapi"
	"github.com/macvirt/macvirt/internal/render"
)

// AgentOptions is what every machine's agent config disk says about the
// operator's agent endpoint.
type AgentOptions struct {
	// Endpoint is the https:// URL agents send heartbeats to.
	Endpoint string
	// CABundle is the PEM bundle the endpoint's certificate chains to.
	CABundle []byte
	// ServerName, when set, is the name agents check the endpoint's
	// certificate against instead of the endpoint's host.
	ServerName string
}

// agentSecretHashChars is how much of the token's hash a new agent Secret's
// name carries: enough that two tokens drawn for one machine never share a
// name, so neither writer can overwrite the other's Secret.
const agentSecretHashChars = 10

// ensureAgentConfig answers: does the machine have its guest-agent token?
// The first time, it draws a token, creates a Secret named after the
// token's hash (the VM's config disk; owned by the machine) and then
// records the hash and the Secret's name on the machine in one patch that
// fails if the machine changed since it was read. The Secret is only ever
// created, never updated, so a second writer (a stale cache, a second
// replica) creates a second Secret instead of overwriting the first, and
// loses the patch: the recorded hash always matches the recorded Secret.
// The loser's Secret, and one left by a crash before the patch, is never
// mounted and goes with the machine.
func (r *MacMachineReconciler) ensureAgentConfig(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] != "" {
		return true, nil
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return false, fmt.Errorf("drawing the agent token: %w", err)
	}
	token := hex.EncodeToString(raw)
	hash := agentapi.HashToken(token)
	data := map[string]string{
		agentapi.KeyEndpoint:  r.Agent.Endpoint,
		agentapi.KeyCABundle:  string(r.Agent.CABundle),
		agentapi.KeyToken:     token,
		agentapi.KeyNamespace: m.Namespace,
		agentapi.KeyMachine:   m.Name,
	}
	if r.Agent.ServerName != "" {
		data[agentapi.KeyServerName] = r.Agent.ServerName
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.Name + "-agent-" + hash[:agentSecretHashChars],
			Namespace: m.Namespace,
			Labels:    map[string]string{macvirtv1alpha1.LabelMachine: m.Name},
		},
		Type:       corev1.SecretTypeOpaque,
		StringData: data,
	}
	if err := controllerutil.SetControllerReference(m, secret, r.Scheme()); err != nil {
		return false, fmt.Errorf("owning the agent Secret by the machine: %w", err)
	}
	if err := r.Create(ctx, secret); err != nil {
		return false, r.createFailed(o, fmt.Errorf("creating the agent Secret %s/%s: %w", m.Namespace, secret.Name, err))
	}
	recorded := m.DeepCopy()
	if recorded.Annotations == nil {
		recorded.Annotations = map[string]string{}
	}
	recorded.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] = hash
	recorded.Annotations[macvirtv1alpha1.AnnotationAgentSecret] = secret.Name
	if err := r.Patch(ctx, recorded, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{})); err != nil {
		// On a conflict another writer may have recorded its own token; the
		// next reconcile reads the machine again and finds it, or draws anew.
		ctrl.LoggerFrom(ctx).Info("the agent token's hash was not recorded; its Secret stays unused until the machine is deleted",
			"secret", secret.Name, "conflict", apierrors.IsConflict(err), "reason", err.Error())
		return false, r.updateFailed(o, fmt.Errorf("recording the agent token's hash and Secret %s: %w", secret.Name, err))
	}
	*m = *recorded
	ctrl.LoggerFrom(ctx).Info("issued the guest agent's token", "secret", secret.Name)
	return true, nil
}

// ensureAgentVolume answers: does the VM mount the agent Secret the machine
// records? A token issued again (its hash annotation deleted, to renew a
// machine's config disk) lives in a new Secret, and the VM, otherwise never
// changed after it is created, is pointed at it; the guest reads it from
// its next start. The patch fails if the VM changed since it was read.
func (r *MacMachineReconciler) ensureAgentVolume(ctx context.Context, o *machineObservation) (bool, error) {
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
