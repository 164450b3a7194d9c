package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// deletingConditions are an object's conditions once it is being deleted:
// Ready False, and a Stalled condition it had False, both with reason
// Deleting. A Stalled condition from before the deletion (a missing class,
// a pool that was full) would otherwise make a normal teardown look like
// one waiting for a human: Argo CD runs its health checks on objects being
// deleted, and its foreground deletion keeps a pool in place while its
// machines stop.
func deletingConditions(conds []metav1.Condition, generation int64, message string) []metav1.Condition {
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

// markDeleting writes deletingConditions into obj's status conditions
// (conds points at them) unless they say so already. The write is guarded
// by obj's resourceVersion, so a stale copy never overwrites conditions
// written since; a conflict or refusal is returned, for a retry, in the
// API server's words.
func markDeleting(ctx context.Context, c client.Client, obj client.Object, conds *[]metav1.Condition, message string) error {
	next := deletingConditions(*conds, obj.GetGeneration(), message)
	if equality.Semantic.DeepEqual(*conds, next) {
		return nil
	}
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil
	}
	*conds = next
	_, err := writeStatus(ctx, c, obj, base, true)
	return err
}

// deletingResult is a deletion reconcile's result: a conflict (a stale
// cached copy) is looked at again once the cache has caught up, without an
// error's growing backoff or its log line.
func deletingResult(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}
