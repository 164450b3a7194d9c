package buildkitequeue

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macbuildkitequeues,verbs=list;watch;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macbuildkitequeues/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch;create;delete;patch

// Reconcile reads the queue's token, polls Buildkite, plans and acts; it
// writes the status once, computed from what it saw and did.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	q := &macvirtv1alpha1.MacBuildkiteQueue{}
	if err := r.Get(ctx, req.NamespacedName, q); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			metrics.ForgetBuildkiteQueue(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &queueScope{Scope: runnercore.Scope{Of: view(q)}, Queue: q, Key: req.NamespacedName, Poll: r.pollOf(req.NamespacedName),
		Taken: map[string]bool{}}
	if !q.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if _, err := base.EnsureFinalizer(ctx, r.Client, q, finalizer); err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil && reterr == nil {
			result, reterr = ctrl.Result{}, err
		}
	}()
	err := base.RunSteps(ctx, s,
		r.loadToken,
		r.connect,
		r.listClaims,
		r.refresh,
		r.plan,
		r.release,
		r.hand,
		r.create,
		r.ensureWarmPool,
	)
	if err != nil {
		return ctrl.Result{}, err
	}
	if s.Blocked != nil {
		return ctrl.Result{RequeueAfter: blockedRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: r.pollEvery()}, nil
}

// patchStatus sets the queue's metrics and makes the runner core's one
// status write of the computed status.
func (r *Reconciler) patchStatus(ctx context.Context, s *queueScope) error {
	q := s.Queue
	for state, n := range map[string]int{"pending": s.Plan.Pending, "running": s.Plan.Running, "finishing": s.Plan.Finishing} {
		metrics.BuildkiteAgents.WithLabelValues(q.Namespace, q.Name, state).Set(float64(n))
	}
	metrics.BuildkiteJobs.WithLabelValues(q.Namespace, q.Name).Set(float64(s.Assigned))
	waited := 0.0
	if since := s.Poll.WaitingSince; !since.IsZero() {
		waited = r.now().Sub(since).Seconds()
	}
	metrics.BuildkiteJobsWaiting.WithLabelValues(q.Namespace, q.Name).Set(waited)
	before := q.DeepCopy()
	q.Status = computeBuildkiteQueueStatus(s)
	return r.engine().WriteStatus(ctx, &s.Scope, before, q)
}

// SetupWithManager watches queues, their claims and their warm pools.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	name := r.ControllerName
	if name == "" {
		name = "macbuildkitequeue"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacBuildkiteQueue{}).
		Owns(&macvirtv1alpha1.MacClaim{}).
		Watches(&macvirtv1alpha1.MacPool{}, handler.EnqueueRequestsFromMapFunc(poolToQueue)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named(name).
		Complete(r)
}

func poolToQueue(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[macvirtv1alpha1.LabelBuildkiteQueue] == "" || l[macvirtv1alpha1.LabelBuildkiteQueueNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[macvirtv1alpha1.LabelBuildkiteQueueNamespace],
		Name: l[macvirtv1alpha1.LabelBuildkiteQueue]}}}
}
