package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// ensureAgentConfig answers: does the machine have its guest-agent token?
// The first time, it draws a token, writes the machine's agent Secret (the
// VM's config disk; owned by the machine) and then records the token's hash
// on the machine, in that order: a crash in between leaves no hash, and the
// next reconcile draws a new token and rewrites the Secret, before the VM
// that reads it exists.
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
	t := true
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
	secret := corev1ac.Secret(render.AgentSecretName(m), m.Namespace).
		WithLabels(map[string]string{macvirtv1alpha1.LabelMachine: m.Name}).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(macvirtv1alpha1.GroupVersion.String()).WithKind("MacMachine").
			WithName(m.Name).WithUID(m.UID).WithController(t).WithBlockOwnerDeletion(t)).
		WithType(corev1.SecretTypeOpaque).
		WithStringData(data)
	if err := r.Apply(ctx, secret, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("writing the agent Secret %s/%s: %w", m.Namespace, render.AgentSecretName(m), err)
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] = agentapi.HashToken(token)
	if err := r.Patch(ctx, m, patch); err != nil {
		return false, fmt.Errorf("recording the agent token's hash: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("issued the guest agent's token", "secret", render.AgentSecretName(m))
	return true, nil
}
