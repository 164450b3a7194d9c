package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// poolClassField indexes MacPools by spec.className.
const poolClassField = "spec.className"

// MacPoolReconciler keeps a pool's idle target of warm machines, never more
// than maxMachines, at most maxProvisioning at once.
type MacPoolReconciler struct {
	client.Client
	Recorder       events.EventRecorder
	ControllerName string
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=create;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile counts the pool's machines, plans, acts, and writes status once.
func (r *MacPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &macvirtv1alpha1.MacPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: pool.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		class = nil
	}
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.InNamespace(pool.Spec.Namespace),
		client.MatchingLabels{macvirtv1alpha1.LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing machines of pool %s: %w", pool.Name, err)
	}
	in := poolInputFor(pool, class, list.Items)
	plan := planPool(in)
	blocked := r.act(ctx, pool, class, list.Items, plan)
	if class == nil && blocked == nil {
		blocked = &problem{macvirtv1alpha1.ReasonClassNotFound,
			fmt.Sprintf("MacClass %q does not exist; the pool creates no machines until it does", pool.Spec.ClassName)}
	}
	return ctrl.Result{}, r.patchPoolStatus(ctx, pool, plan, blocked)
}

// poolInputFor turns the pool and its machines into planner input. Without
// a class, the pool plans nothing but still counts.
func poolInputFor(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, items []macvirtv1alpha1.MacMachine) poolInput {
	in := poolInput{Pool: pool.Name, Idle: pool.Spec.EffectiveIdle(), MaxProv: pool.Spec.MaxProvisioning, Paused: pool.Spec.Paused}
	in.Max = pool.Spec.EffectiveMaxMachines()
	if class == nil {
		in.Paused = true
	} else {
		in.Revision = render.ClassRevision(class)
	}
	for i := range items {
		m := &items[i]
		in.Machines = append(in.Machines, poolMachine{Name: m.Name, Revision: m.Spec.ClassRevision, State: poolMachineState(m)})
	}
	return in
}

// poolMachineState classifies a machine for its pool. A machine that was
// ever bound counts as bound: a used machine never returns to the idle set.
// An unbound machine whose guest agent fell silent past heartbeatTimeout is
// replaced like a failed one: nobody should be handed a hung Mac.
func poolMachineState(m *macvirtv1alpha1.MacMachine) machineState {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return stateTerminating
	case m.Spec.ClaimRef != nil || m.Labels[macvirtv1alpha1.LabelReleased] != "":
		return stateBound
	case m.Status.Phase == macvirtv1alpha1.MachineFailed, guestFellSilent(m):
		return stateFailed
	case machineIsReady(m):
		return stateIdle
	}
	return stateProvisioning
}

// machineIsReady reports the machine's Ready condition.
func machineIsReady(m *macvirtv1alpha1.MacMachine) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
}

// act creates and deletes as planned. Deletes carry the machine's
// resourceVersion, so a machine a claim bound meanwhile is never deleted.
func (r *MacPoolReconciler) act(ctx context.Context, pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass,
	items []macvirtv1alpha1.MacMachine, plan poolPlan) *problem {
	log := ctrl.LoggerFrom(ctx)
	byName := map[string]*macvirtv1alpha1.MacMachine{}
	for i := range items {
		byName[items[i].Name] = &items[i]
	}
	for _, name := range plan.Delete {
		m := byName[name]
		rv, uid := m.ResourceVersion, m.UID
		err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.Error(err, "deleting pool machine", "machine", name)
			continue
		}
		if err == nil {
			log.Info("deleted pool machine", "machine", name)
			poolMachineOps.WithLabelValues("delete").Inc()
		}
	}
	for _, name := range plan.Create {
		err := r.Create(ctx, newPoolMachine(pool, class, name))
		switch {
		case apierrors.IsAlreadyExists(err):
			// Another reconcile (or operator) took the slot: the cap holds.
		case apierrors.IsNotFound(err):
			return &problem{macvirtv1alpha1.ReasonNamespaceMissing,
				fmt.Sprintf("namespace %q of the pool's machines does not exist; create it or change spec.namespace", pool.Spec.Namespace)}
		case err != nil:
			log.Error(err, "creating pool machine", "machine", name)
		default:
			log.Info("created pool machine", "machine", name)
			poolMachineOps.WithLabelValues("create").Inc()
		}
	}
	return nil
}

// newPoolMachine is a pool's machine in a given slot. The pool owns it
// until it is bound; binding removes the owner reference so deleting the
// pool never deletes a tenant's machine.
func newPoolMachine(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, name string) *macvirtv1alpha1.MacMachine {
	t := true
	return &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: pool.Spec.Namespace,
			Labels:    map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: "MacPool",
				Name: pool.Name, UID: pool.UID, Controller: &t}},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: render.ClassRevision(class)},
	}
}

func (r *MacPoolReconciler) patchPoolStatus(ctx context.Context, pool *macvirtv1alpha1.MacPool, plan poolPlan, p *problem) error {
	st := plan.Counts
	st.ObservedGeneration = pool.Generation
	st.MaxMachines = pool.Spec.EffectiveMaxMachines()
	// A copy: SetStatusCondition edits in place, and the patch base must
	// keep the old conditions.
	st.Conditions = append([]metav1.Condition(nil), pool.Status.Conditions...)
	target := pool.Spec.EffectiveIdle()
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, ObservedGeneration: pool.Generation}
	switch {
	case p != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, p.Reason, p.Message
	case st.Idle >= target:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected,
			fmt.Sprintf("%d idle machines ready (target %d)", st.Idle, target)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, macvirtv1alpha1.ReasonIdleTargetNotMet,
			fmt.Sprintf("%d of %d idle machines ready, %d provisioning", st.Idle, target, st.Provisioning)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.SetStatusCondition(&st.Conditions, stalledCondition(pool.Generation, p))
	poolGauges(pool.Name, st)
	if equality.Semantic.DeepEqual(pool.Status, st) {
		return nil
	}
	before := pool.DeepCopy()
	pool.Status = st
	if err := r.Status().Patch(ctx, pool, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// SetupWithManager watches pools, their machines (by label) and classes.
func (r *MacPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
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

func (r *MacPoolReconciler) classToPools(ctx context.Context, o client.Object) []reconcile.Request {
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools, client.MatchingFields{poolClassField: o.GetName()}); err != nil {
		return nil
	}
	return poolRequests(pools.Items, "")
}

func (r *MacPoolReconciler) namespaceToPools(ctx context.Context, o client.Object) []reconcile.Request {
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools); err != nil {
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

// guestFellSilent says the machine's agent answered once and then stayed
// silent past heartbeatTimeout.
func guestFellSilent(m *macvirtv1alpha1.MacMachine) bool {
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == macvirtv1alpha1.ReasonHeartbeatStale
}
