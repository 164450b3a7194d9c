package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
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
	Recorder events.EventRecorder
	// Clock times how long a machine's guest has been silent.
	Clock          clock.PassiveClock
	ControllerName string
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=create;delete;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// poolScope is what one reconcile of a pool read, decided and failed to do.
type poolScope struct {
	Pool *macvirtv1alpha1.MacPool
	// Class is nil when the pool's class does not exist.
	Class    *macvirtv1alpha1.MacClass
	Machines []macvirtv1alpha1.MacMachine
	Plan     poolPlan
	// Blocked is a problem that needs a human (class or namespace missing).
	Blocked *problem
	// WriteFailed is the first create or delete the API server refused in
	// this reconcile, in its own words.
	WriteFailed *problem
	// Slots, when machines of the pool wait for a macOS slot, says so with
	// each Apple node's free slots.
	Slots *problem
}

// Reconcile gathers the pool's class and machines, plans, creates and
// deletes, and writes the status once, computed from what it saw and did.
func (r *MacPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	pool := &macvirtv1alpha1.MacPool{}
	if err := r.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			forgetPool(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		forgetPool(pool.Name)
		return deletingResult(markDeleting(ctx, r.Client, pool, &pool.Status.Conditions,
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
	for _, step := range []func(context.Context, *poolScope) (bool, error){
		r.loadPoolClass,
		r.listPoolMachines,
		r.observeSlots,
		r.adoptPoolMachines,
		r.deletePoolMachines,
		r.createPoolMachines,
	} {
		if proceed, err := step(ctx, s); err != nil || !proceed {
			return ctrl.Result{}, err
		}
	}
	// A silent guest's grace ends without any event to say so.
	return ctrl.Result{RequeueAfter: s.Plan.RecheckAfter}, nil
}

// loadPoolClass answers: does the pool's class exist? Without it the pool
// plans nothing but still counts its machines.
func (r *MacPoolReconciler) loadPoolClass(ctx context.Context, s *poolScope) (bool, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Pool.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("getting MacClass %s: %w", s.Pool.Spec.ClassName, err)
		}
		s.Blocked = &problem{macvirtv1alpha1.ReasonClassNotFound,
			fmt.Sprintf("MacClass %q does not exist; the pool creates no machines until it does", s.Pool.Spec.ClassName)}
		return true, nil
	}
	s.Class = class
	return true, nil
}

// listPoolMachines answers: what machines does the pool have, and what
// should change? The plan is pure (planPool).
func (r *MacPoolReconciler) listPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.InNamespace(s.Pool.Spec.Namespace),
		client.MatchingLabels{macvirtv1alpha1.LabelPool: s.Pool.Name}); err != nil {
		return false, fmt.Errorf("listing machines of pool %s: %w", s.Pool.Name, err)
	}
	s.Machines = s.Machines[:0]
	for i := range list.Items {
		m := &list.Items[i]
		if owner := metav1.GetControllerOfNoCopy(m); owner != nil && owner.UID != s.Pool.UID && m.Spec.ClaimRef == nil &&
			m.Labels[macvirtv1alpha1.LabelReleased] == "" {
			// Unbound, and controlled by something else (an earlier pool of
			// this name, not yet collected): not this pool's to count.
			continue
		}
		s.Machines = append(s.Machines, *m)
	}
	s.Plan = planPool(poolInputFor(s.Pool, s.Class, s.Machines, r.Clock.Now()))
	return true, nil
}

// adoptPoolMachines answers: does the pool control every unbound machine it
// counts? One labelled for it in its namespace, unbound and controlled by
// nothing (the garbage collector orphaned it when an earlier pool of this
// name was deleted with --cascade=orphan) is adopted, as a ReplicaSet adopts
// its orphans: claims bind only machines their pool controls. The patch
// carries the machine's resourceVersion; a refused one shows in status.
func (r *MacPoolReconciler) adoptPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var errs []error
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.Spec.ClaimRef != nil || m.Labels[macvirtv1alpha1.LabelReleased] != "" || !m.DeletionTimestamp.IsZero() ||
			metav1.GetControllerOfNoCopy(m) != nil {
			continue
		}
		adopted := m.DeepCopy()
		adopted.OwnerReferences = append(adopted.OwnerReferences, controllerRef("MacPool", s.Pool.Name, s.Pool.UID))
		err := r.Patch(ctx, adopted, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("adopted an orphaned pool machine", "machine", m.Name)
			*m = *adopted
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or changed (bound, perhaps): the next reconcile sees it.
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonUpdateFailed, "adopting", m.Name, err))
		}
	}
	return true, errors.Join(errs...)
}

// deletePoolMachines deletes as planned. Deletes carry the machine's
// resourceVersion, so a machine a claim bound meanwhile is never deleted.
// A refused delete is recorded and returned (backoff); the others still go.
func (r *MacPoolReconciler) deletePoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	byName := map[string]*macvirtv1alpha1.MacMachine{}
	for i := range s.Machines {
		byName[s.Machines[i].Name] = &s.Machines[i]
	}
	var errs []error
	for _, name := range s.Plan.Delete {
		m := byName[name]
		rv, uid := m.ResourceVersion, m.UID
		err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("deleted pool machine", "machine", name)
			poolMachineOps.WithLabelValues("delete").Inc()
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or changed (bound, recovered): the next
			// reconcile sees it as it is now.
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonDeleteFailed, "deleting", name, err))
		}
	}
	return true, errors.Join(errs...)
}

// createPoolMachines creates as planned, in deterministic slots, so the
// cap holds across stale caches and two operators.
func (r *MacPoolReconciler) createPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var errs []error
	for _, name := range s.Plan.Create {
		err := r.Create(ctx, newPoolMachine(s.Pool, s.Class, name))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created pool machine", "machine", name)
			poolMachineOps.WithLabelValues("create").Inc()
		case apierrors.IsAlreadyExists(err):
			// Another reconcile (or operator) took the slot: the cap holds.
		case apierrors.IsNotFound(err):
			// The namespace is missing: a human must create it; its
			// creation wakes the pool.
			s.Blocked = &problem{macvirtv1alpha1.ReasonNamespaceMissing,
				fmt.Sprintf("namespace %q of the pool's machines does not exist; create it or change spec.namespace", s.Pool.Spec.Namespace)}
			return false, nil
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonCreateFailed, "creating", name, err))
		}
	}
	return true, errors.Join(errs...)
}

// writeFailed records a refused write on the scope (the first one shows in
// status), as a Warning event, and returns it wrapped for backoff.
func (r *MacPoolReconciler) writeFailed(s *poolScope, reason, verb, name string, err error) error {
	err = fmt.Errorf("%s machine %s/%s: %w", verb, s.Pool.Spec.Namespace, name, err)
	if s.WriteFailed == nil {
		s.WriteFailed = &problem{reason, err.Error()}
	}
	recordEvent(r.Recorder, s.Pool, corev1.EventTypeWarning, reason, "Reconcile", err.Error())
	return err
}

// poolInputFor turns the pool and its machines into planner input. Without
// a class, the pool plans nothing but still counts.
func poolInputFor(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, items []macvirtv1alpha1.MacMachine, now time.Time) poolInput {
	in := poolInput{Pool: pool.Name, Idle: pool.Spec.EffectiveIdle(), MaxProv: pool.Spec.MaxProvisioning, Paused: pool.Spec.Paused,
		MaxUnhealthy: pool.Spec.MaxUnhealthy, Now: now}
	in.Max = pool.Spec.EffectiveMaxMachines()
	if class == nil {
		in.Paused = true
	} else {
		in.Revision = render.ClassRevision(class)
	}
	for i := range items {
		m := &items[i]
		pm := poolMachine{Name: m.Name, Revision: m.Spec.ClassRevision, State: poolMachineState(m)}
		if c := silentGuest(m); pm.State == stateFailed && c != nil && m.Status.Phase != macvirtv1alpha1.MachineFailed {
			pm.ReplaceAt = silentReplaceAt(m, c, class)
		}
		in.Machines = append(in.Machines, pm)
	}
	return in
}

// poolMachineState classifies a machine for its pool. A machine that was
// ever bound counts as bound: a used machine never returns to the idle set.
// An unbound machine whose guest agent fell silent past heartbeatTimeout is
// unhealthy like a failed one: nobody should be handed a hung Mac.
func poolMachineState(m *macvirtv1alpha1.MacMachine) machineState {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return stateTerminating
	case m.Labels[macvirtv1alpha1.LabelReleased] != "":
		return stateReleased
	case m.Spec.ClaimRef != nil:
		return stateBound
	case drainedNode(m) != "":
		return stateDraining
	case m.Status.Phase == macvirtv1alpha1.MachineFailed, guestFellSilent(m):
		return stateFailed
	case machineIsReady(m):
		return stateIdle
	}
	return stateProvisioning
}

// newPoolMachine is a pool's machine in a given slot. The pool owns it
// until it is bound; binding removes the owner reference so deleting the
// pool never deletes a tenant's machine.
func newPoolMachine(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, name string) *macvirtv1alpha1.MacMachine {
	return &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       pool.Spec.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name},
			OwnerReferences: []metav1.OwnerReference{controllerRef("MacPool", pool.Name, pool.UID)},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: render.ClassRevision(class)},
	}
}

// patchPoolStatus writes the computed status, only if it changed.
func (r *MacPoolReconciler) patchPoolStatus(ctx context.Context, s *poolScope) error {
	pool := s.Pool
	st := computePoolStatus(s)
	poolGauges(pool, st)
	if equality.Semantic.DeepEqual(pool.Status, st) {
		return nil
	}
	before := pool.DeepCopy()
	pool.Status = st
	if written, err := writeStatus(ctx, r.Client, pool, before, false); !written {
		return err
	}
	was := meta.FindStatusCondition(before.Status.Conditions, macvirtv1alpha1.ConditionReady)
	now := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
	if now.Reason == macvirtv1alpha1.ReasonTooManyUnhealthy && (was == nil || was.Reason != now.Reason) {
		recordEvent(r.Recorder, pool, corev1.EventTypeWarning, now.Reason, "Replace", now.Message)
	}
	// The moment a human is needed is a Warning event; refused writes and
	// too many unhealthy machines have theirs already.
	if reason, note, ok := turnedStalled(before.Status.Conditions, st.Conditions); ok && s.WriteFailed == nil &&
		reason != macvirtv1alpha1.ReasonTooManyUnhealthy {
		recordEvent(r.Recorder, pool, corev1.EventTypeWarning, reason, "Reconcile", note)
	}
	return nil
}

// SetupWithManager watches pools, their machines (by label) and classes.
func (r *MacPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
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

func (r *MacPoolReconciler) classToPools(ctx context.Context, o client.Object) []reconcile.Request {
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools, client.MatchingFields{poolClassField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the pools of a class; they wait for their next event", "class", o.GetName())
		return nil
	}
	return poolRequests(pools.Items, "")
}

func (r *MacPoolReconciler) namespaceToPools(ctx context.Context, o client.Object) []reconcile.Request {
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

// guestFellSilent says the machine's agent answered once and then stayed
// silent past heartbeatTimeout.
func guestFellSilent(m *macvirtv1alpha1.MacMachine) bool { return silentGuest(m) != nil }

// silentGuest is the machine's GuestAgentReady condition when it says the
// guest fell silent; nil otherwise.
func silentGuest(m *macvirtv1alpha1.MacMachine) *metav1.Condition {
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != macvirtv1alpha1.ReasonHeartbeatStale {
		return nil
	}
	return c
}
