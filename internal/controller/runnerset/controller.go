package runnerset

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
	"sigs.k8s.io/controller-runtime/pkg/source"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macrunnersets,verbs=list;watch;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macrunnersets/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch;create;delete;patch

// Reconcile gathers the set's credentials, listener and claims, plans, and
// acts; it writes the status once, computed from what it saw and did.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	set := &macvirtv1alpha1.MacRunnerSet{}
	if err := r.Get(ctx, req.NamespacedName, set); err != nil {
		if apierrors.IsNotFound(err) {
			r.Listeners.Stop(req.NamespacedName)
			metrics.ForgetRunnerSet(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &setScope{Scope: runnercore.Scope{Of: view(set)}, Set: set, Key: req.NamespacedName}
	if !set.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if _, err := base.EnsureFinalizer(ctx, r.Client, set, finalizer); err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil && reterr == nil {
			result, reterr = ctrl.Result{}, err
		}
	}()
	err := base.RunSteps(ctx, s,
		r.loadCredentials,
		r.claimScaleSet,
		r.ensureListener,
		r.listClaims,
		r.refreshRunners,
		r.plan,
		r.recordJobs,
		r.release,
		r.ensureJIT,
		r.create,
		r.ensureWarmPool,
	)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(s.Claims) > 0 || s.Demand.Assigned > 0 || !s.Demand.Listening {
		return ctrl.Result{RequeueAfter: busyRecheck}, nil
	}
	return ctrl.Result{RequeueAfter: quietRecheck}, nil
}

// patchStatus sets the set's metrics and makes the runner core's one
// status write of the computed status.
func (r *Reconciler) patchStatus(ctx context.Context, s *setScope) error {
	set := s.Set
	for state, n := range map[string]int{"pending": s.Plan.Pending, "idle": s.Plan.Idle, "running": s.Plan.Running, "finishing": s.Plan.Finishing} {
		metrics.RunnerSetRunners.WithLabelValues(set.Namespace, set.Name, state).Set(float64(n))
	}
	before := set.DeepCopy()
	set.Status = computeRunnerSetStatus(s, r.now())
	return r.engine().WriteStatus(ctx, &s.Scope, before, set)
}

// SetupWithManager watches runner sets, their claims, their warm pools and
// the listeners' events, and runs the listeners under the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := mgr.Add(r.Listeners); err != nil {
		return err
	}
	name := r.ControllerName
	if name == "" {
		name = "macrunnerset"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacRunnerSet{}).
		Owns(&macvirtv1alpha1.MacClaim{}).
		Watches(&macvirtv1alpha1.MacPool{}, handler.EnqueueRequestsFromMapFunc(poolToSet)).
		WatchesRawSource(source.Channel(r.Listeners.Events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named(name).
		Complete(r)
}

func poolToSet(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[macvirtv1alpha1.LabelRunnerSet] == "" || l[macvirtv1alpha1.LabelRunnerSetNamespace] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[macvirtv1alpha1.LabelRunnerSetNamespace], Name: l[macvirtv1alpha1.LabelRunnerSet]}}}
}
