package machine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// releaseIfClaimGone answers: does the claim this machine is bound to still
// exist? When it is gone (or was recreated under another UID), the machine
// is released as the claim asked, the way a PersistentVolume is: Delete
// deletes the machine (its finalizer stops it gracefully first); Retain
// labels it released, stops it gracefully and keeps it with its disks. A
// released machine is never bound again.
func (r *Reconciler) releaseIfClaimGone(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	ref := m.Spec.ClaimRef
	if ref == nil || m.Labels[macvirtv1alpha1.LabelReleased] != "" {
		return true, nil
	}
	gone, err := r.claimGone(ctx, ref)
	if err != nil || gone == "" {
		return err == nil, err
	}
	log := ctrl.LoggerFrom(ctx)
	if m.Annotations[macvirtv1alpha1.AnnotationReclaimPolicy] == string(macvirtv1alpha1.ReclaimRetain) {
		patch := client.MergeFrom(m.DeepCopy())
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[macvirtv1alpha1.LabelReleased] = "true"
		// Stopped gracefully (the run-state step does it, through the stop
		// subresource), disks kept: a released Mac holds no host capacity.
		stopped := false
		m.Spec.Running = &stopped
		if err := r.Patch(ctx, m, patch); err != nil {
			return false, fmt.Errorf("marking machine released: %w", err)
		}
		log.Info("claim "+gone+"; machine retained, released and stopping", "claim", ref.Namespace+"/"+ref.Name)
		base.RecordEvent(r.Recorder, m, corev1.EventTypeNormal, "Released", "Release", fmt.Sprintf(
			"claim %s/%s %s; machine retained (reclaimPolicy Retain), stopped gracefully with its disks kept", ref.Namespace, ref.Name, gone))
		return true, nil
	}
	uid := m.UID
	if err := r.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting released machine: %w", err)
	}
	o.Released = true
	log.Info("claim "+gone+"; deleting machine gracefully", "claim", ref.Namespace+"/"+ref.Name)
	base.RecordEvent(r.Recorder, m, corev1.EventTypeNormal, "Released", "Release", fmt.Sprintf(
		"claim %s/%s %s; stopping and deleting the machine (reclaimPolicy Delete)", ref.Namespace, ref.Name, gone))
	return false, nil
}

// claimGone says why the referenced claim incarnation holds the machine no
// more ("is gone", "has expired"), or "" while it does. What the cache
// shows is confirmed by the API server before anything is released.
func (r *Reconciler) claimGone(ctx context.Context, ref *macvirtv1alpha1.ObjectRef) (string, error) {
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	gone := ""
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		claim := &macvirtv1alpha1.MacClaim{}
		err := reader.Get(ctx, key, claim)
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return "", fmt.Errorf("getting MacClaim %s: %w", key, err)
		case err == nil && claim.UID == ref.UID && claim.DeletionTimestamp.IsZero():
			if claim.Status.Phase != macvirtv1alpha1.ClaimExpired {
				return "", nil
			}
			gone = "has expired (its lifetime is over)"
		default:
			gone = "is gone"
		}
	}
	return gone, nil
}
