package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// claimWaitingField indexes unbound MacClaims by the bind key they wait on.
const claimWaitingField = "macvirt.io/waiting-for"

// MacClaimReconciler binds claims to machines. The machine side is written
// first (spec.claimRef, with the machine's resourceVersion, so two claims
// can never win the same machine), then the claim's status.
type MacClaimReconciler struct {
	client.Client
	// APIReader confirms, uncached, that a bound machine is really gone.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// MaxConcurrentReconciles is the number of claims bound in parallel.
	MaxConcurrentReconciles int
	ControllerName          string
	// ConnectionResync is how often a Ready claim's connection Secret is
	// applied again, so one deleted by hand comes back (the operator may
	// not watch Secrets); DefaultConnectionResync when zero.
	ConnectionResync time.Duration

	// connectionApplied holds when each claim's connection Secret was last
	// applied by this process.
	connectionApplied sync.Map

	// inFlight holds machines a worker of this operator is binding or has
	// just bound, until the cache shows their claimRef. Workers skip them, so
	// they neither race each other nor retry a machine the cache still shows
	// idle. The API server's resourceVersion check still decides every race
	// with other operators; this only avoids losing races to ourselves.
	inFlight reservations
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch

// claimScope is what one reconcile of a claim observed and decided.
type claimScope struct {
	claim   *macvirtv1alpha1.MacClaim
	class   *macvirtv1alpha1.MacClass
	machine *macvirtv1alpha1.MacMachine
	lost    string
	waiting *problem
	// writeFailed is a create the API server refused, in its words.
	writeFailed *problem
	// retrySoon says every idle machine tried was taken under us: look
	// again soon, without a status write (the cache is about to catch up).
	retrySoon bool
}

// Reconcile finds or makes the claim's binding, then writes status once,
// computed from what it found.
func (r *MacClaimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	claim := &macvirtv1alpha1.MacClaim{}
	if err := r.Get(ctx, req.NamespacedName, claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.connectionApplied.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !claim.DeletionTimestamp.IsZero() {
		// Release happens on the machine side, which sees its claim gone.
		return ctrl.Result{}, nil
	}
	s := &claimScope{claim: claim}
	defer func() {
		switch {
		case s.retrySoon:
			result = ctrl.Result{RequeueAfter: lostRaceRetry}
			return
		case reterr != nil && s.writeFailed == nil:
			// A failed read leaves the scope incomplete: a status computed
			// from it could unbind a bound claim on paper. Retry instead.
			return
		}
		if err := r.patchClaimStatus(ctx, s); err != nil && reterr == nil {
			reterr = err
		}
		if reterr == nil && claim.Status.Connection != nil {
			result.RequeueAfter = r.connectionResync()
		}
	}()
	for _, step := range []func(context.Context, *claimScope) (bool, error){
		r.findBound,
		r.bind,
	} {
		if proceed, err := step(ctx, s); err != nil || !proceed {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// findBound finds the machine bound to the claim: the one its status names,
// or, after a restart between the two binding writes, the one whose
// claimRef carries the claim's UID. A named machine that is gone, bound to
// another UID, or Failed makes the claim Lost; it is never re-bound.
func (r *MacClaimReconciler) findBound(ctx context.Context, s *claimScope) (bool, error) {
	var won macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &won, client.MatchingFields{claimUIDField: string(s.claim.UID)}); err != nil {
		return false, fmt.Errorf("listing the machines bound to claim %s/%s: %w", s.claim.Namespace, s.claim.Name, err)
	}
	ref := s.claim.Status.MachineRef
	if ref == nil {
		// The lowest name, so every operator adopts the same machine when
		// two of them bound one each; the claim's status write, guarded by
		// its resourceVersion, lets only one of them record it.
		for i := range won.Items {
			if s.machine == nil || won.Items[i].Name < s.machine.Name {
				s.machine = &won.Items[i]
			}
		}
		return true, nil
	}
	if err := r.deleteOrphans(ctx, s.claim, ref, won.Items); err != nil {
		return false, err
	}
	m := &macvirtv1alpha1.MacMachine{}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	err := r.Get(ctx, key, m)
	if apierrors.IsNotFound(err) {
		// The cache may lag; only the API server can say it is gone.
		err = r.APIReader.Get(ctx, key, m)
	}
	switch {
	case apierrors.IsNotFound(err):
		s.lost = fmt.Sprintf("bound machine %s no longer exists", key)
	case err != nil:
		return false, fmt.Errorf("getting bound machine %s: %w", key, err)
	case m.UID != ref.UID || m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != s.claim.UID:
		s.lost = fmt.Sprintf("machine %s is not the one bound to this claim any more", key)
	case m.Status.Phase == macvirtv1alpha1.MachineFailed:
		s.lost = fmt.Sprintf("bound machine %s failed", key)
		s.machine = m
	default:
		s.machine = m
	}
	return true, nil
}

// deleteOrphans deletes machines bound to this claim that its status does
// not name: two operators each bound one, and only one was recorded. The
// orphan was never handed to the tenant, and its claimRef cannot change, so
// it goes (with its resourceVersion as precondition) and its pool replaces it.
func (r *MacClaimReconciler) deleteOrphans(ctx context.Context, claim *macvirtv1alpha1.MacClaim, ref *macvirtv1alpha1.ObjectRef,
	bound []macvirtv1alpha1.MacMachine) error {
	for i := range bound {
		m := &bound[i]
		if m.UID == ref.UID || !m.DeletionTimestamp.IsZero() {
			continue
		}
		uid, rv := m.UID, m.ResourceVersion
		if err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil &&
			!apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting orphaned machine %s/%s: %w", m.Namespace, m.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("deleted a machine bound twice to the claim", "machine", m.Name, "kept", ref.Name)
		recordEvent(r.Recorder, claim, corev1.EventTypeNormal, "OrphanDeleted", "Bind", fmt.Sprintf(
			"machine %s/%s was also bound to this claim by a concurrent reconcile; deleted it, keeping %s", m.Namespace, m.Name, ref.Name))
	}
	return nil
}

// bind takes an idle machine, or creates one on demand, or records why the
// claim waits. A claim that has its machine (or lost it) needs none.
func (r *MacClaimReconciler) bind(ctx context.Context, s *claimScope) (bool, error) {
	if s.machine != nil || s.lost != "" {
		return true, nil
	}
	class, p, err := r.resolveClass(ctx, s.claim)
	if err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	s.class = class
	if p, err := r.checkTenancy(ctx, s.claim, class); err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.MatchingFields{bindableField: bindKey(s.claim)}); err != nil {
		return false, fmt.Errorf("listing idle machines for %s: %w", bindKey(s.claim), err)
	}
	candidates := make([]*macvirtv1alpha1.MacMachine, 0, len(list.Items))
	for i := range list.Items {
		candidates = append(candidates, &list.Items[i])
	}
	for _, m := range candidateOrder(s.claim.UID, candidates) {
		key := client.ObjectKeyFromObject(m)
		if !r.inFlight.reserve(key, r.Clock.Now()) {
			continue
		}
		won, err := r.claimMachine(ctx, s.claim, m)
		if !won {
			r.inFlight.release(key)
		}
		if err != nil {
			return false, err
		}
		if won {
			s.machine = m
			return true, nil
		}
	}
	if s.claim.Spec.PoolName == "" && class.Spec.Tenancy.OnDemand != nil && *class.Spec.Tenancy.OnDemand {
		return r.createOnDemand(ctx, s)
	}
	s.waiting = &problem{macvirtv1alpha1.ReasonWaitingForMachine, fmt.Sprintf("no idle machine in %s yet", bindKey(s.claim))}
	// Every candidate taken by another claim (or changed) under us means
	// the cache may still list machines that are free: try again soon.
	s.retrySoon = len(candidates) > 0
	return true, nil
}

// DefaultConnectionResync is how often a Ready claim's connection Secret is
// applied again by default.
const DefaultConnectionResync = 10 * time.Minute

func (r *MacClaimReconciler) connectionResync() time.Duration {
	if r.ConnectionResync > 0 {
		return r.ConnectionResync
	}
	return DefaultConnectionResync
}

// lostRaceRetry is how soon a claim that lost every race looks again.
const lostRaceRetry = 10 * time.Millisecond

// claimMachine writes the machine side of the binding in one update that
// carries the machine's resourceVersion: claimRef, the reclaim policy, and
// no pool owner reference (deleting the pool must not delete a tenant's
// machine). On a conflict it reads the machine from the API server: bound
// to this claim already (by another operator) means won; bound to another
// claim means lost; still free means one more try with the fresh copy.
func (r *MacClaimReconciler) claimMachine(ctx context.Context, claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) (bool, error) {
	for attempt := 0; attempt < 2; attempt++ {
		err := r.Update(ctx, bindingOf(claim, m))
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err) || apierrors.IsInvalid(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("binding machine %s/%s: %w", m.Namespace, m.Name, err)
		}
		fresh := &macvirtv1alpha1.MacMachine{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), fresh); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if ref := fresh.Spec.ClaimRef; ref != nil {
			*m = *fresh
			return ref.UID == claim.UID, nil
		}
		if len(bindableKeys(fresh)) == 0 {
			return false, nil
		}
		m = fresh
	}
	return false, nil
}

// bindingOf is the machine with the claim's binding written in.
func bindingOf(claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) *macvirtv1alpha1.MacMachine {
	m = m.DeepCopy()
	m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[macvirtv1alpha1.AnnotationReclaimPolicy] = string(reclaimPolicy(claim))
	refs := m.OwnerReferences[:0]
	for _, o := range m.OwnerReferences {
		if o.Kind != "MacPool" {
			refs = append(refs, o)
		}
	}
	m.OwnerReferences = refs
	return m
}

func reclaimPolicy(claim *macvirtv1alpha1.MacClaim) macvirtv1alpha1.ReclaimPolicy {
	if claim.Spec.ReclaimPolicy == "" {
		return macvirtv1alpha1.ReclaimDelete
	}
	return claim.Spec.ReclaimPolicy
}

// createOnDemand creates a machine in the claim's namespace, pre-bound to
// it. It is owned by the claim under the Delete policy only, so a cluster's
// garbage collector never deletes a Retained machine.
func (r *MacClaimReconciler) createOnDemand(ctx context.Context, s *claimScope) (bool, error) {
	claim := s.claim
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: onDemandName(claim), Namespace: claim.Namespace,
			Labels:      map[string]string{macvirtv1alpha1.LabelClass: s.class.Name},
			Annotations: map[string]string{macvirtv1alpha1.AnnotationReclaimPolicy: string(reclaimPolicy(claim))},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{
			ClassName: s.class.Name, ClassRevision: render.ClassRevision(s.class),
			ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	if reclaimPolicy(claim) == macvirtv1alpha1.ReclaimDelete {
		m.OwnerReferences = []metav1.OwnerReference{controllerRef("MacClaim", claim.Name, claim.UID)}
	}
	err := r.Create(ctx, m)
	if apierrors.IsAlreadyExists(err) {
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, fmt.Errorf("getting on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		}
	} else if err != nil {
		// A quota, an admission webhook or policy, or a webhook that is
		// down: the tenant sees the API server's words on the claim.
		err = fmt.Errorf("creating on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		s.writeFailed = &problem{macvirtv1alpha1.ReasonCreateFailed, err.Error()}
		recordEvent(r.Recorder, claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Bind", err.Error())
		return false, err
	}
	if m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != claim.UID {
		s.waiting = &problem{macvirtv1alpha1.ReasonWaitingForMachine, fmt.Sprintf("machine %s exists and belongs to another claim", m.Name)}
		return true, nil
	}
	ctrl.LoggerFrom(ctx).Info("created on-demand machine", "machine", m.Name)
	s.machine = m
	return true, nil
}

// resolveClass finds the claim's class, through its pool when it names one.
func (r *MacClaimReconciler) resolveClass(ctx context.Context, claim *macvirtv1alpha1.MacClaim) (*macvirtv1alpha1.MacClass, *problem, error) {
	className := claim.Spec.ClassName
	if claim.Spec.PoolName != "" {
		pool := &macvirtv1alpha1.MacPool{}
		if err := r.Get(ctx, types.NamespacedName{Name: claim.Spec.PoolName}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &problem{macvirtv1alpha1.ReasonPoolNotFound, fmt.Sprintf("MacPool %q does not exist", claim.Spec.PoolName)}, nil
			}
			return nil, nil, fmt.Errorf("getting MacPool %s: %w", claim.Spec.PoolName, err)
		}
		if className != "" && className != pool.Spec.ClassName {
			return nil, &problem{macvirtv1alpha1.ReasonClassMismatch, fmt.Sprintf(
				"spec.className %q differs from pool %q's class %q; drop spec.className or name a pool of that class",
				className, pool.Name, pool.Spec.ClassName)}, nil
		}
		className = pool.Spec.ClassName
	}
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: className}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &problem{macvirtv1alpha1.ReasonClassNotFound, fmt.Sprintf("MacClass %q does not exist", className)}, nil
		}
		return nil, nil, fmt.Errorf("getting MacClass %s: %w", className, err)
	}
	return class, nil, nil
}

// checkTenancy keeps a claim the class does not admit waiting, by the
// policy the admission webhook applies (internal/tenancy): the namespace's
// labels or the class may have changed since admission. A claim asking for
// Retain also waits while its namespace holds the class's
// maxReleasedPerNamespace released machines.
func (r *MacClaimReconciler) checkTenancy(ctx context.Context, claim *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) (*problem, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: claim.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("getting namespace %s for tenancy: %w", claim.Namespace, err)
	}
	policy := reclaimPolicy(claim)
	if refusal := tenancy.Check(class, claim.Namespace, ns.Labels, policy); refusal != nil {
		return &problem{refusal.Reason, refusal.Message}, nil
	}
	if policy != macvirtv1alpha1.ReclaimRetain || class.Spec.Tenancy.MaxReleasedPerNamespace == nil {
		return nil, nil
	}
	var released macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &released, client.MatchingFields{releasedField: releasedKey(claim.Namespace, class.Name)}); err != nil {
		return nil, fmt.Errorf("counting the released machines of namespace %s: %w", claim.Namespace, err)
	}
	if refusal := tenancy.ReleasedFull(class, claim.Namespace, len(released.Items)); refusal != nil {
		return &problem{refusal.Reason, refusal.Message}, nil
	}
	return nil, nil
}

// SetupWithManager watches claims, machines (to complete, lose or wake
// claims), and what a waiting claim waits for: classes and pools (created
// after the claim, or changed, e.g. to onDemand) and namespaces' labels
// (tenancy). Only spec changes of classes and pools, and only label changes
// of namespaces, wake anyone.
func (r *MacClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	name := r.ControllerName
	if name == "" {
		name = "macclaim"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacClaim{}).
		Watches(&macvirtv1alpha1.MacMachine{}, r.machineEvents()).
		Watches(&macvirtv1alpha1.MacClass{}, handler.EnqueueRequestsFromMapFunc(r.classToWaitingClaims),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&macvirtv1alpha1.MacPool{}, handler.EnqueueRequestsFromMapFunc(r.poolToWaitingClaims),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToWaitingClaims),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Named(name).
		Complete(r)
}

// machineEvents wakes the claim a machine is bound to and, when a machine
// becomes bindable (created Ready, or turned Ready and unbound), the claims
// waiting for one like it. Other machine updates wake nobody: waking every
// waiting claim on every update would make them race for machines they
// cannot get.
func (r *MacClaimReconciler) machineEvents() handler.TypedEventHandler[client.Object, reconcile.Request] {
	bound := func(m *macvirtv1alpha1.MacMachine, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if ref := m.Spec.ClaimRef; ref != nil {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m := e.Object.(*macvirtv1alpha1.MacMachine)
			bound(m, q)
			r.wakeWaiting(ctx, bindableKeys(m), q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, m := e.ObjectOld.(*macvirtv1alpha1.MacMachine), e.ObjectNew.(*macvirtv1alpha1.MacMachine)
			if old.Spec.ClaimRef != nil {
				// The binding write itself needs no echo: the reconcile that
				// made it records it (a restarted operator lists every claim).
				bound(m, q)
			}
			if len(bindableKeys(old)) == 0 {
				r.wakeWaiting(ctx, bindableKeys(m), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if m, ok := e.Object.(*macvirtv1alpha1.MacMachine); ok {
				bound(m, q)
				if ref := m.Spec.ClaimRef; ref != nil && m.Labels[macvirtv1alpha1.LabelReleased] != "" {
					// Room for one more released machine of that namespace.
					for _, req := range r.waitingClaimsIn(ctx, ref.Namespace) {
						q.Add(req)
					}
				}
			}
		},
	}
}

func (r *MacClaimReconciler) wakeWaiting(ctx context.Context, keys []string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for _, req := range r.waitingClaims(ctx, keys) {
		q.Add(req)
	}
}

// waitingClaims lists the unbound claims waiting on any of the bind keys.
// A failed list is logged: the claims then wait for their next event.
func (r *MacClaimReconciler) waitingClaims(ctx context.Context, keys []string) []reconcile.Request {
	var reqs []reconcile.Request
	for _, k := range keys {
		var claims macvirtv1alpha1.MacClaimList
		if err := r.List(ctx, &claims, client.MatchingFields{claimWaitingField: k}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "listing the claims waiting on a bind key; they wait for their next event", "key", k)
			continue
		}
		for i := range claims.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
		}
	}
	return reqs
}

// classToWaitingClaims wakes the claims waiting on a class that appeared or
// changed: those that name it, and those that name one of its pools.
func (r *MacClaimReconciler) classToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	keys := []string{"class/" + obj.GetName()}
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools, client.MatchingFields{poolClassField: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the pools of a class; claims waiting on them wait for their next event", "class", obj.GetName())
	}
	for i := range pools.Items {
		keys = append(keys, "pool/"+pools.Items[i].Name)
	}
	return r.waitingClaims(ctx, keys)
}

// poolToWaitingClaims wakes the claims that name a pool that appeared or
// changed.
func (r *MacClaimReconciler) poolToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waitingClaims(ctx, []string{"pool/" + obj.GetName()})
}

// namespaceToWaitingClaims wakes the unbound claims of a namespace whose
// labels changed: a class's tenancy.allowedNamespaces may now match it.
func (r *MacClaimReconciler) namespaceToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waitingClaimsIn(ctx, obj.GetName())
}

// waitingClaimsIn lists the unbound claims of a namespace.
func (r *MacClaimReconciler) waitingClaimsIn(ctx context.Context, namespace string) []reconcile.Request {
	var claims macvirtv1alpha1.MacClaimList
	if err := r.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing a namespace's claims; its waiting claims wait for their next event", "namespace", namespace)
		return nil
	}
	var reqs []reconcile.Request
	for i := range claims.Items {
		if claimWaiting(&claims.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
		}
	}
	return reqs
}
