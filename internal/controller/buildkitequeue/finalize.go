package buildkitequeue

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
)

// deregisterGrace is how long a deleted queue keeps trying to deregister
// its stack before it lets go, saying so.
const deregisterGrace = 10 * time.Minute

// finalize releases every agent's Mac, deletes the warm pool, deregisters
// the stack and lets the queue go. Jobs reserved and never acquired are
// scheduled again when their reservations expire.
func (r *Reconciler) finalize(ctx context.Context, s *queueScope) (ctrl.Result, error) {
	q := s.Queue
	if !controllerutil.ContainsFinalizer(q, finalizer) {
		return ctrl.Result{}, nil
	}
	if err := base.MarkDeleting(ctx, r.Client, q, &q.Status.Conditions,
		"the queue is being deleted: its agents' Macs are released and its stack deregistered"); err != nil {
		return base.DeletingResult(err)
	}
	done, err := r.engine().ReleaseAll(ctx, &s.Scope)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !done {
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if err := r.deregister(ctx, s); err != nil {
		if r.now().Sub(q.DeletionTimestamp.Time) < deregisterGrace {
			return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
		}
		base.RecordEvent(r.Recorder, q, corev1.EventTypeWarning, "StackLeftOnBuildkite", "Delete",
			fmt.Sprintf("could not deregister stack %q from Buildkite; it shows as lost there and holds nothing: %v", stackKey(q), err))
	}
	if _, err := base.RemoveFinalizer(ctx, r.Client, q, finalizer); err != nil {
		return ctrl.Result{}, err
	}
	r.forget(s.Key)
	metrics.ForgetBuildkiteQueue(q.Namespace, q.Name)
	return ctrl.Result{}, nil
}

// deregister removes the queue's stack from Buildkite, if it was
// registered (by this process, or by one before it: status.stackKey).
func (r *Reconciler) deregister(ctx context.Context, s *queueScope) error {
	if !s.Poll.Registered && s.Queue.Status.StackKey == "" {
		return nil
	}
	if _, err := r.loadToken(ctx, s); err != nil {
		return err
	}
	if s.Client == nil {
		return fmt.Errorf("%s", s.Blocked.Message)
	}
	return s.Client.Deregister(ctx)
}
