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
// Ready: it is never on the way there. The operator creates Secrets and
// deletes the ones it created, and never reads or patches one (an answer
// would carry the contents of any Secret it could name). So a Secret is
// created once; when the connection changes it is deleted, by the UID its
// create returned, and created again; and every ConnectionResync it is
// created again, which brings back one deleted by hand (AlreadyExists says
// it is there). What the write came to is recorded for the status
// (s.secret); a Secret of its name that is not the claim's, and a refusal
// in the API server's words, are Warning events as they begin.
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
	changed := !equality.Semantic.DeepEqual(c.Status.Connection, conn)
	clashed := meta.IsStatusConditionFalse(c.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
	created, stale := c.Status.ConnectionSecretUID, false
	if uid := r.secrets.get(c.UID, name); uid != "" {
		// Created by this process, maybe before a status write that did
		// not go through (a conflict, or another operator's write during
		// a hand-over): still the claim's own, and newer than what the
		// status says, which is then written again.
		recorded, created, stale = true, uid, uid != c.Status.ConnectionSecretUID
	}
	if recorded && !changed && !stale && !r.connectionDue(key, now) || !recorded && clashed && !r.connectionDue(key, now) {
		r.secrets.forget(c.UID)
		return true, nil
	}
	out, err := r.writeConnectionSecret(ctx, c, name, conn, recorded, created, recorded && changed)
	out.at = now
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
		out.refused = refused
		s.secret = out
		return false, err
	case err != nil:
		return false, err
	case out.conflict != "" && !clashed:
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonSecretConflict, "WriteConnectionSecret", out.conflict)
	}
	s.secret = out
	return true, nil
}

// writeConnectionSecret creates the claim's connection Secret, first
// deleting the one the claim recorded (created, its UID) when replace says
// its connection changed. A Secret of the name that is there already is the
// claim's when it is recorded (resync), and someone else's otherwise.
func (r *Reconciler) writeConnectionSecret(ctx context.Context, c *macvirtv1alpha1.MacClaim, name string,
	conn *macvirtv1alpha1.ClaimConnection, recorded bool, created types.UID, replace bool) (*secretOutcome, error) {
	if replace {
		old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
		var opts []client.DeleteOption
		if uid := created; uid != "" {
			// Only the Secret this claim's operator created goes. A claim
			// from before UIDs were recorded names a Secret the claim
			// controlled when it was last written.
			opts = append(opts, client.Preconditions{UID: &uid})
		}
		if err := r.Delete(ctx, old, opts...); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return &secretOutcome{}, &secretWriteError{macvirtv1alpha1.ReasonUpdateFailed,
				fmt.Errorf("replacing connection Secret %s/%s: %w", c.Namespace, name, err)}
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelClaim: c.Name},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", c.Name, c.UID)}},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptrTrue(),
		Data:      connectionData(conn),
	}
	err := r.Create(ctx, secret)
	switch {
	case err == nil:
		r.secrets.record(c.UID, name, secret.UID)
		return &secretOutcome{name: name, uid: secret.UID}, nil
	case apierrors.IsAlreadyExists(err) && recorded && !replace:
		return &secretOutcome{name: name, uid: created}, nil
	case apierrors.IsAlreadyExists(err):
		return &secretOutcome{conflict: fmt.Sprintf("Secret %s/%s exists and is not one this claim created; it is left as it is, and the "+
			"connection is only in the claim's status: rename or delete that Secret to have it written", c.Namespace, name)}, nil
	}
	return &secretOutcome{}, &secretWriteError{macvirtv1alpha1.ReasonCreateFailed, fmt.Errorf("creating connection Secret %s/%s: %w", c.Namespace, name, err)}
}

func ptrTrue() *bool { t := true; return &t }
