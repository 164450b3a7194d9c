package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// ensureConnectionSecret answers: does the claim's connection Secret hold
// the connection its status gives (connectionOf)? It is written when the
// connection changes, and again every ConnectionResync (and once after a
// restart): the operator cannot watch Secrets, so this is how a deleted one
// comes back, and how a clash clears once the other Secret is gone. What
// the write came to is recorded for the status (s.secret); a Secret of its
// name that is not the claim's, and a refusal in the API server's words,
// are Warning events as they begin.
func (r *Reconciler) ensureConnectionSecret(ctx context.Context, s *claimScope) (bool, error) {
	c := s.claim
	conn := connectionOf(s)
	now := r.Clock.Now()
	key := client.ObjectKeyFromObject(c)
	clashed := meta.IsStatusConditionFalse(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
	due := (c.Status.ConnectionSecretName == "" && !clashed) || !equality.Semantic.DeepEqual(c.Status.Connection, conn) ||
		r.connectionDue(key, now)
	if conn == nil || !due {
		return true, nil
	}
	conflict, err := r.applyConnectionSecret(ctx, c, conn)
	var refused *secretWriteError
	switch {
	case errors.As(err, &refused):
		// A quota, an admission policy or webhook, or an API server that
		// failed: the claim says so in the API server's words, and the write
		// is retried with backoff.
		if was := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady); was == nil ||
			was.Status != metav1.ConditionFalse || was.Reason != refused.reason {
			base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, refused.reason, "WriteConnectionSecret", refused.Error())
		}
		s.secret = &secretOutcome{refused: refused, at: now}
		return false, err
	case err != nil:
		return false, err
	case conflict != "":
		if !clashed {
			base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonSecretConflict, "WriteConnectionSecret", conflict)
		}
		s.secret = &secretOutcome{conflict: conflict, at: now}
		r.connectionApplied.Store(key, now)
		return true, nil
	}
	s.secret = &secretOutcome{applied: conn, at: now}
	return true, nil
}

// applyConnectionSecret writes host, port, user and known_hosts into a
// Secret owned by the claim, by server-side apply: the operator creates and
// updates Secrets but never reads them.
func (r *Reconciler) applyConnectionSecret(ctx context.Context, c *macvirtv1alpha1.MacClaim, conn *macvirtv1alpha1.ClaimConnection) (conflict string, err error) {
	name := connectionSecretName(c)
	host := conn.Host
	if host == "" {
		host = conn.Address
	}
	data := map[string][]byte{
		"host":        []byte(host),
		"address":     []byte(conn.Address),
		"port":        []byte(fmt.Sprint(conn.SSHPort)),
		"user":        []byte(defaultSSHUser),
		"known_hosts": []byte(knownHosts(conn)),
	}
	if conn.VNCPort != 0 {
		data["vnc-port"] = []byte(fmt.Sprint(conn.VNCPort))
	}
	if ext := conn.External; ext != nil {
		if ext.Address != "" {
			data["external-address"] = []byte(ext.Address)
		}
		if ext.SSHPort != 0 {
			data["external-port"] = []byte(fmt.Sprint(ext.SSHPort))
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelClass: c.Spec.ClassName},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", c.Name, c.UID)}},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	var createErr error
	if c.Status.ConnectionSecretName == "" && !meta.IsStatusConditionFalse(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady) {
		// The claim's status names no Secret yet: it is most likely not
		// there, so it is created first, one request. Whatever refuses the
		// create lets the patch below decide: a Secret of that name (this
		// claim's from before a crash, or a tenant's), which admission may
		// refuse to create again (a full quota) before the name is checked.
		if createErr = r.Create(ctx, secret.DeepCopy()); createErr == nil {
			return "", nil
		}
	}
	// Once the status names it, the Secret usually exists (it is written
	// again every resync), so it is patched first: one request, and none
	// that changes anything when the connection is the same. The operator
	// may not read Secrets, so the API server checks, in the same request,
	// that this claim controls it: the JSON patch first tests the owner
	// reference the claim put first: this claim's, as controller. A
	// tenant's own Secret of that name, even one naming the claim as a
	// plain owner, fails the test and is left untouched.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": c.UID},
		{"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": true},
		{"op": "add", "path": "/data", "value": data},
	})
	if err != nil {
		return "", err
	}
	err = r.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Sprintf("Secret %s/%s exists and is not controlled by this claim (the API server: %v); it is left as it is, and the connection "+
			"is only in the claim's status: rename or delete that Secret to have it written", c.Namespace, name, err), nil
	case !apierrors.IsNotFound(err):
		return "", &secretWriteError{macvirtv1alpha1.ReasonUpdateFailed, fmt.Errorf("updating connection Secret %s/%s: %w", c.Namespace, name, err)}
	}
	if createErr != nil && !apierrors.IsAlreadyExists(createErr) {
		// There is none, and creating one was refused: that refusal stands.
		return "", &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, createErr)}
	}
	if err := r.Create(ctx, secret); err != nil {
		// AlreadyExists: created meanwhile (by a tenant or another
		// operator); the retry patches it, or finds the clash.
		return "", &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, err)}
	}
	return "", nil
}
