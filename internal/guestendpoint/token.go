package guestendpoint

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
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Address is what every machine's agent config disk says about the
// endpoint: where it is and how its certificate is checked.
type Address struct {
	// Endpoint is the https:// URL agents send heartbeats to.
	Endpoint string
	// CABundle is the PEM bundle the endpoint's certificate chains to.
	CABundle []byte
	// ServerName, when set, is the name agents check the endpoint's
	// certificate against instead of the endpoint's host.
	ServerName string
}

// secretHashChars is how much of the token's hash a new agent Secret's
// name carries: enough that two tokens drawn for one machine never share a
// name, so neither writer can overwrite the other's Secret.
const secretHashChars = 10

// WriteError is a write of IssueToken that the API server refused: the
// Secret's create (Create) or the machine's patch.
type WriteError struct {
	Create bool
	err    error
}

func (e *WriteError) Error() string { return e.err.Error() }
func (e *WriteError) Unwrap() error { return e.err }

// IssueToken gives machine m its guest-agent token, the one credential the
// endpoint accepts from its guest, and reports whether m has one. The first
// time, it draws a token, creates a Secret named after the token's hash
// (the VM's config disk, owned by the machine, with addr in it) and then
// records the hash and the Secret's name on the machine in one patch that
// fails if the machine changed since it was read. The Secret is only ever
// created, never updated, so a second writer (a stale cache, a second
// replica) creates a second Secret instead of overwriting the first, and
// loses the patch: the recorded hash always matches the recorded Secret.
// The loser's Secret, and one left by a crash before the patch, is never
// mounted and goes with the machine. A refused write is a *WriteError; m
// is updated in place once the patch is written.
func IssueToken(ctx context.Context, c client.Client, m *macvirtv1alpha1.MacMachine, addr Address) (bool, error) {
	if m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] != "" {
		return true, nil
	}
	_, err := issue(ctx, c, m, addr)
	return err == nil, err
}

// ReissueToken draws machine m a new token as IssueToken draws the first,
// whether or not it has one, and returns its configuration: what a host
// agent shares into the VM it starts next. The guest of the VM's previous
// start holds a token that no longer counts.
func ReissueToken(ctx context.Context, c client.Client, m *macvirtv1alpha1.MacMachine, addr Address) (map[string]string, error) {
	return issue(ctx, c, m, addr)
}

// issue draws a token, creates its Secret and records both on m.
func issue(ctx context.Context, c client.Client, m *macvirtv1alpha1.MacMachine, addr Address) (map[string]string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("drawing the agent token: %w", err)
	}
	token := hex.EncodeToString(raw)
	hash := guestprotocol.HashToken(token)
	data := map[string]string{
		guestprotocol.KeyEndpoint:   addr.Endpoint,
		guestprotocol.KeyCABundle:   string(addr.CABundle),
		guestprotocol.KeyToken:      token,
		guestprotocol.KeyNamespace:  m.Namespace,
		guestprotocol.KeyMachine:    m.Name,
		guestprotocol.KeyMachineUID: string(m.UID),
	}
	if addr.ServerName != "" {
		data[guestprotocol.KeyServerName] = addr.ServerName
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.Name + "-agent-" + hash[:secretHashChars],
			Namespace: m.Namespace,
			Labels:    map[string]string{macvirtv1alpha1.LabelMachine: m.Name},
		},
		Type:       corev1.SecretTypeOpaque,
		StringData: data,
	}
	if err := controllerutil.SetControllerReference(m, secret, c.Scheme()); err != nil {
		return nil, fmt.Errorf("owning the agent Secret by the machine: %w", err)
	}
	if err := c.Create(ctx, secret); err != nil {
		return nil, &WriteError{Create: true, err: fmt.Errorf("creating the agent Secret %s/%s: %w", m.Namespace, secret.Name, err)}
	}
	recorded := m.DeepCopy()
	if recorded.Annotations == nil {
		recorded.Annotations = map[string]string{}
	}
	recorded.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] = hash
	recorded.Annotations[macvirtv1alpha1.AnnotationAgentSecret] = secret.Name
	if err := c.Patch(ctx, recorded, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{})); err != nil {
		// On a conflict another writer may have recorded its own token; the
		// next reconcile reads the machine again and finds it, or draws anew.
		ctrl.LoggerFrom(ctx).Info("the agent token's hash was not recorded; its Secret stays unused until the machine is deleted",
			"secret", secret.Name, "conflict", apierrors.IsConflict(err), "reason", err.Error())
		return nil, &WriteError{err: fmt.Errorf("recording the agent token's hash and Secret %s: %w", secret.Name, err)}
	}
	*m = *recorded
	ctrl.LoggerFrom(ctx).Info("issued the guest agent's token", "secret", secret.Name)
	return data, nil
}
