package pool

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/metrics"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=create;delete;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile gathers the pool's class and machines, plans, creates and
// deletes, and writes the status once, computed from what it saw and did.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	pool := &macvirtv1alpha1.MacPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.ForgetPool(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		metrics.ForgetPool(pool.Name)
		return base.DeletingResult(base.MarkDeleting(ctx, r.Client, pool, &pool.Status.Conditions,
			"the pool is being deleted; its unbound machines are stopped and deleted with it"))
	}
	s := &poolScope{Pool: pool}
	defer func() {
		if reterr != nil && s.WriteFailed == nil {
			// A failed read leaves the scope incomplete: a status computed
			// from it would report an empty pool. Retry instead.
			return
		}
		if err := r.patchPoolStatus(ctx, s); err != nil && reterr == nil {
			reterr = err
		}
	}()
	if err := base.RunSteps(ctx, s,
		r.loadPoolClass,
		r.listPoolMachines,
		r.observeSlots,
		r.adoptPoolMachines,
		r.deletePoolMachines,
		r.ensurePoolNamespace,
		r.createPoolMachines,
	); err != nil {
		return ctrl.Result{}, err
	}
	// A silent guest's grace ends without any event to say so.
	return ctrl.Result{RequeueAfter: s.Plan.RecheckAfter}, nil
}

// patchPoolStatus writes the computed status, only if it changed.
func (r *Reconciler) patchPoolStatus(ctx context.Context, s *poolScope) error {
	pool := s.Pool
	st := computePoolStatus(s)
	metrics.PoolGauges(pool, st)
	if equality.Semantic.DeepEqual(pool.Status, st) {
		return nil
	}
	before := pool.DeepCopy()
	pool.Status = st
	if written, err := base.WriteStatus(ctx, r.Client, pool, before, false); !written {
		return err
	}
	was := meta.FindStatusCondition(before.Status.Conditions, macvirtv1alpha1.ConditionReady)
	now := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
	if now.Reason == macvirtv1alpha1.ReasonTooManyUnhealthy && (was == nil || was.Reason != now.Reason) {
		base.RecordEvent(r.Recorder, pool, corev1.EventTypeWarning, now.Reason, "Replace", now.Message)
	}
	// The moment a human is needed is a Warning event; refused writes and
	// too many unhealthy machines have theirs already.
	if reason, note, ok := base.TurnedStalled(before.Status.Conditions, st.Conditions); ok && s.WriteFailed == nil &&
		reason != macvirtv1alpha1.ReasonTooManyUnhealthy {
		base.RecordEvent(r.Recorder, pool, corev1.EventTypeWarning, reason, "Reconcile", note)
	}
	return nil
}

// SetupWithManager watches pools, their machines (by label) and classes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	name := r.ControllerName
	if name == "" {
		name = "macpool"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacPool{}).
		Watches(&macvirtv1alpha1.MacMachine{}, handler.EnqueueRequestsFromMapFunc(machineToPool)).
		Watches(&macvirtv1alpha1.MacClass{}, handler.EnqueueRequestsFromMapFunc(r.classToPools)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToPools)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 2}).
		Named(name).
		Complete(r)
}

func machineToPool(_ context.Context, o client.Object) []reconcile.Request {
	if pool := o.GetLabels()[macvirtv1alpha1.LabelPool]; pool != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
	}
	return nil
}

func (r *Reconciler) classToPools(ctx context.Context, o client.Object) []reconcile.Request {
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools, client.MatchingFields{index.PoolClass: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the pools of a class; they wait for their next event", "class", o.GetName())
		return nil
	}
	return poolRequests(pools.Items, "")
}

func (r *Reconciler) namespaceToPools(ctx context.Context, o client.Object) []reconcile.Request {
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing pools for a namespace change; they wait for their next event", "namespace", o.GetName())
		return nil
	}
	return poolRequests(pools.Items, o.GetName())
}

func poolRequests(pools []macvirtv1alpha1.MacPool, namespace string) []reconcile.Request {
	var out []reconcile.Request
	for i := range pools {
		if namespace == "" || pools[i].Spec.Namespace == namespace {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: pools[i].Name}})
		}
	}
	return out
}
