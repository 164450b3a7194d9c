package base

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// ConflictRetry is how soon an object whose write met a newer version is
// looked at again: long enough for the cache to catch up.
const ConflictRetry = 100 * time.Millisecond

// DeletingConditions are an object's conditions once it is being deleted:
// Ready False, and a Stalled condition it had False, both with reason
// Deleting. A Stalled condition from before the deletion (a missing class,
// a pool that was full) would otherwise make a normal teardown look like
// one waiting for a human: Argo CD runs its health checks on objects being
// deleted, and its foreground deletion keeps a pool in place while its
// machines stop.
func DeletingConditions(conds []metav1.Condition, generation int64, message string) []metav1.Condition {
	out := make([]metav1.Condition, len(conds))
	for i := range conds {
		conds[i].DeepCopyInto(&out[i])
	}
	meta.SetStatusCondition(&out, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonDeleting, Message: message, ObservedGeneration: generation})
	if meta.FindStatusCondition(out, macvirtv1alpha1.ConditionStalled) != nil {
		meta.SetStatusCondition(&out, metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionFalse,
			Reason: macvirtv1alpha1.ReasonDeleting, Message: message, ObservedGeneration: generation})
	}
	return out
}

// MarkDeleting writes DeletingConditions into obj's status conditions
// (conds points at them) unless they say so already. The write is guarded
// by obj's resourceVersion, so a stale copy never overwrites conditions
// written since; a conflict or refusal is returned, for a retry, in the
// API server's words.
func MarkDeleting(ctx context.Context, c client.Client, obj client.Object, conds *[]metav1.Condition, message string) error {
	next := DeletingConditions(*conds, obj.GetGeneration(), message)
	if equality.Semantic.DeepEqual(*conds, next) {
		return nil
	}
	before, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil
	}
	*conds = next
	_, err := WriteStatus(ctx, c, obj, before, true)
	return err
}

// DeletingResult is a deletion reconcile's result: a conflict (a stale
// cached copy) is looked at again once the cache has caught up, without an
// error's growing backoff or its log line.
func DeletingResult(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: ConflictRetry}, nil
	}
	return ctrl.Result{}, err
}
