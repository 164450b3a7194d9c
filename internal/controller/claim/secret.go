package claim

import (
	"context"
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

// ensureConnectionSecret answers: does the Secret a claim asked for
// (spec.writeConnectionSecretToRef, or the one an older operator gave every
// claim) hold the connection its status gives? Only once the claim is
// Ready: it is never on the way there. The operator only creates Secrets:
// it never reads, patches, updates or deletes one, as each of those answers
// with a Secret's contents (a delete does, of a Secret a finalizer holds),
// and would do so for any Secret of the cluster it named. So the Secret
// holds only what lasts as long as the binding (secretView: the name to
// connect to, not the Mac's pod address), is created once, goes with the
// claim (its owner), and every ConnectionResync is created again, which
// brings back one deleted by hand (AlreadyExists says it is there). When
// what it holds does change (the Mac's host keys, a load balancer's
// address), the claim says the Secret is stale and that deleting it has it
// written again. What the write came to is recorded for the status
// (s.secret); a Secret of its name that is not the claim's, a stale one,
// and a refusal in the API server's words, are Warning events as they
// begin.
func (r *Reconciler) ensureConnectionSecret(ctx context.Context, s *claimScope) (bool, error) {
	c := s.claim
	name := connectionSecretName(c)
	if name == "" || s.lost != "" || s.machine == nil || c.Status.Phase != macvirtv1alpha1.ClaimReady {
		return true, nil
	}
	conn := connectionOf(s)
	if conn == nil {
		return true, nil
	}
	now := r.Clock.Now()
	key := client.ObjectKeyFromObject(c)
	recorded := c.Status.ConnectionSecretName == name
	was := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
	clashed := was != nil && was.Status == metav1.ConditionFalse && was.Reason == macvirtv1alpha1.ReasonSecretConflict
	wasStale := was != nil && was.Status == metav1.ConditionFalse && was.Reason == macvirtv1alpha1.ReasonConnectionSecretStale
	created, behind := c.Status.ConnectionSecretUID, false
	if mine, _, ok := r.secrets.Get(c.UID, now); ok && mine.name == name && mine.uid != "" {
		// Created by this process, maybe before a status write that did
		// not go through (a conflict, or another operator's write during
		// a hand-over): still the claim's own, and newer than what the
		// status says, which is then written again.
		recorded, created, behind = true, mine.uid, mine.uid != c.Status.ConnectionSecretUID
	}
	changed := recorded && c.Status.Connection != nil &&
		!equality.Semantic.DeepEqual(connectionData(secretView(c.Status.Connection)), connectionData(secretView(conn)))
	due := r.connectionDue(key, now)
	if recorded && !changed && !behind && !due || !recorded && clashed && !due {
		r.secrets.Forget(c.UID)
		return true, nil
	}
	out, err := r.createConnectionSecret(ctx, c, name, conn, recorded, created, changed || wasStale)
	out.at = now
	var refused *secretWriteError
	switch {
	case errors.As(err, &refused):
		// A quota, an admission policy or webhook, or an API server that
		// failed: the claim says so in the API server's words, and the write
		// is retried with backoff.
		if was == nil || was.Status != metav1.ConditionFalse || was.Reason != refused.reason {
			base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, refused.reason, "WriteConnectionSecret", refused.Error())
		}
		out.refused = refused
		s.secret = out
		return false, err
	case err != nil:
		return false, err
	case out.conflict != "" && !clashed:
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonSecretConflict, "WriteConnectionSecret", out.conflict)
	case out.stale != "" && !wasStale:
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonConnectionSecretStale, "WriteConnectionSecret", out.stale)
	}
	s.secret = out
	return true, nil
}

// createConnectionSecret creates the claim's connection Secret. A Secret
// of the name that is there already is the claim's when it is recorded
// (created, its UID), and then stale when the claim knows it holds an
// earlier connection; it is someone else's otherwise.
func (r *Reconciler) createConnectionSecret(ctx context.Context, c *macvirtv1alpha1.MacClaim, name string,
	conn *macvirtv1alpha1.ClaimConnection, recorded bool, created types.UID, stale bool) (*secretOutcome, error) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelClaim: c.Name},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", c.Name, c.UID)}},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptrTrue(),
		Data:      connectionData(secretView(conn)),
	}
	err := r.Create(ctx, secret)
	switch {
	case err == nil:
		r.secrets.Assume(c.UID, createdSecret{name: name, uid: secret.UID}, r.Clock.Now(), base.UntilForgotten)
		return &secretOutcome{name: name, uid: secret.UID}, nil
	case apierrors.IsAlreadyExists(err) && recorded && stale:
		return &secretOutcome{name: name, uid: created, stale: fmt.Sprintf("Secret %s/%s holds an earlier connection (the Mac's host keys "+
			"or external address changed since it was written); the operator only creates Secrets, so delete it and it is written "+
			"again within %s; the claim's status has the connection as it is now", c.Namespace, name, r.connectionResync())}, nil
	case apierrors.IsAlreadyExists(err) && recorded:
		return &secretOutcome{name: name, uid: created}, nil
	case apierrors.IsAlreadyExists(err):
		return &secretOutcome{conflict: fmt.Sprintf("Secret %s/%s exists and is not one this claim created; it is left as it is, and the "+
			"connection is only in the claim's status: rename or delete that Secret to have it written", c.Namespace, name)}, nil
	}
	return &secretOutcome{}, &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, err)}
}

// secretView is the part of a connection the Secret holds: all of it but
// the Mac's pod address, which changes whenever its VM starts again, when
// there is a name to connect to instead.
func secretView(conn *macvirtv1alpha1.ClaimConnection) *macvirtv1alpha1.ClaimConnection {
	v := conn.DeepCopy()
	if v.Host != "" {
		v.Address = ""
	}
	return v
}

func ptrTrue() *bool { t := true; return &t }
