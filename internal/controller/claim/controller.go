package claim

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/drain"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/state"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch

// Reconcile finds or makes the claim's binding, then writes status once,
// computed from what it found. The steps first find what is bound (reads
// only), then complete a binding in progress and delete orphans (writes
// the binding protocol needs), then bind, expose and publish.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	claim := &macvirtv1alpha1.MacClaim{}
	if err := r.Get(ctx, req.NamespacedName, claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.connectionApplied.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !claim.DeletionTimestamp.IsZero() {
		// Release happens on the machine side, which sees its claim gone.
		r.assumed.Forget(claim.UID)
		r.secrets.Forget(claim.UID)
		r.expiryWarned.Forget(claim.UID)
		return base.DeletingResult(base.MarkDeleting(ctx, r.Client, claim, &claim.Status.Conditions,
			"the claim is being deleted; its machine is released by its reclaimPolicy once it is gone"))
	}
	s := &claimScope{claim: claim}
	defer func() {
		// The status first, from what the steps found; then a conflict,
		// whether a step's or the status write's, is no failure.
		result, reterr = r.finishReconcile(ctx, s, req.NamespacedName, reterr)
		if apierrors.IsConflict(reterr) {
			// A lost race or a stale copy, not a failure: look again once
			// the cache has caught up, without the growing backoff of an
			// error (a claim that lost many races would wait minutes).
			ctrl.LoggerFrom(ctx).V(1).Info("lost a race; looking again", "reason", reterr.Error())
			result, reterr = ctrl.Result{RequeueAfter: base.ConflictRetry}, nil
		}
	}()
	return ctrl.Result{}, base.RunSteps(ctx, s,
		r.findBound,
		r.completeBinding,
		r.deleteOrphans,
		r.checkNotExpired,
		r.bind,
		r.checkExposure,
		r.ensureService,
		r.publishName,
		r.ensureConnectionSecret,
	)
}

// finishReconcile ends a reconcile whose steps returned err: it writes the
// status computed from the scope, unless the scope is incomplete (a failed
// read) or the write is to wait (a race lost under us, a binding about to
// be Ready), and says when to look at the claim again. The error it
// returns is the reconcile's.
func (r *Reconciler) finishReconcile(ctx context.Context, s *claimScope, key types.NamespacedName, err error) (ctrl.Result, error) {
	claim := s.claim
	refused := s.secret != nil && s.secret.refused != nil
	switch {
	case s.retrySoon:
		return ctrl.Result{RequeueAfter: lostRaceRetry}, err
	case err != nil && s.writeFailed == nil && !refused:
		// A failed read leaves the scope incomplete: a status computed
		// from it could unbind a bound claim on paper. Retry instead.
		return ctrl.Result{}, err
	}
	if hold := statusHold(s, r.Clock.Now()); hold > 0 {
		// Just bound, Ready but for its NetworkPolicy, which the
		// machine's exposure is writing: one status write, Bound and
		// Ready together, once it is (its event wakes the claim).
		return ctrl.Result{RequeueAfter: hold}, err
	}
	if werr := r.patchClaimStatus(ctx, s); werr != nil && (err == nil || refused && errors.Is(err, s.secret.refused)) {
		// A status write that failed after a refused Secret speaks for
		// the reconcile: a conflict is looked at again soon, quietly.
		err = werr
	}
	if o := s.secret; o != nil && o.refused == nil && claim.Status.Connection != nil {
		r.connectionApplied.Assume(key, struct{}{}, o.at, base.UntilForgotten)
	}
	var result ctrl.Result
	if err == nil && connectionSecretName(claim) != "" && claim.Status.Phase == macvirtv1alpha1.ClaimReady {
		result.RequeueAfter = r.connectionResync()
	}
	if err == nil {
		result.RequeueAfter = r.watchLifetime(claim, result.RequeueAfter)
	}
	if err == nil && s.waitSlot && (result.RequeueAfter == 0 || result.RequeueAfter > slotRetry) {
		result.RequeueAfter = slotRetry
	}
	return result, err
}

// slotRetry is how often a claim whose idle machines are all suspended on
// full MacHosts looks for a free slot: no event of theirs says one freed.
const slotRetry = 2 * time.Second

// SetupWithManager watches claims, machines (to complete, lose or wake
// claims), machines' NetworkPolicies (a claim is Ready once its machine's
// lets it in), and what a waiting claim waits for: classes and pools (created
// after the claim, or changed, e.g. to onDemand) and namespaces' labels
// (tenancy). Only spec changes of classes and pools, and only label changes
// of namespaces, wake anyone.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	name := r.ControllerName
	if name == "" {
		name = "macclaim"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacClaim{}).
		Owns(&corev1.Service{}).
		Owns(&discoveryv1.EndpointSlice{}).
		Watches(&macvirtv1alpha1.MacMachine{}, r.machineEvents()).
		Watches(&networkingv1.NetworkPolicy{}, handler.EnqueueRequestsFromMapFunc(r.policyToClaim)).
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
func (r *Reconciler) machineEvents() handler.TypedEventHandler[client.Object, reconcile.Request] {
	bound := func(m *macvirtv1alpha1.MacMachine, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if ref := m.Spec.ClaimRef; ref != nil {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}})
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m := e.Object.(*macvirtv1alpha1.MacMachine)
			bound(m, q)
			r.wakeWaiting(ctx, index.BindableKeys(m), q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, m := e.ObjectOld.(*macvirtv1alpha1.MacMachine), e.ObjectNew.(*macvirtv1alpha1.MacMachine)
			if old.Spec.ClaimRef != nil {
				// The binding write itself needs no echo: the reconcile that
				// made it records it (a restarted operator lists every claim).
				bound(m, q)
			}
			if len(index.BindableKeys(old)) == 0 {
				r.wakeWaiting(ctx, index.BindableKeys(m), q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if m, ok := e.Object.(*macvirtv1alpha1.MacMachine); ok {
				bound(m, q)
				if ref := m.Spec.ClaimRef; ref != nil && state.Retains(m) {
					// Room for one more retained machine of that namespace.
					for _, req := range r.waitingClaimsIn(ctx, ref.Namespace) {
						q.Add(req)
					}
				}
			}
		},
	}
}

// policyToClaim maps a machine's NetworkPolicy to the claim its machine
// is bound to.
func (r *Reconciler) policyToClaim(ctx context.Context, obj client.Object) []reconcile.Request {
	owner := metav1.GetControllerOfNoCopy(obj)
	if owner == nil || owner.Kind != "MacMachine" {
		return nil
	}
	m := &macvirtv1alpha1.MacMachine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: owner.Name}, m); err != nil || m.UID != owner.UID {
		return nil
	}
	if ref := m.Spec.ClaimRef; ref != nil {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}}}
	}
	return nil
}

func (r *Reconciler) wakeWaiting(ctx context.Context, keys []string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for _, req := range r.waitingClaims(ctx, keys) {
		q.Add(req)
	}
}

// waitingClaims lists the unbound claims waiting on any of the bind keys.
// A failed list is logged: the claims then wait for their next event.
func (r *Reconciler) waitingClaims(ctx context.Context, keys []string) []reconcile.Request {
	var reqs []reconcile.Request
	for _, k := range keys {
		// Only names are taken: no copies of what may be many claims.
		var claims macvirtv1alpha1.MacClaimList
		if err := r.List(ctx, &claims, client.MatchingFields{index.ClaimWaitingFor: k}, client.UnsafeDisableDeepCopy); err != nil {
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
func (r *Reconciler) classToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	keys := []string{"class/" + obj.GetName()}
	var pools macvirtv1alpha1.MacPoolList
	if err := r.List(ctx, &pools, client.MatchingFields{index.PoolClass: obj.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the pools of a class; claims waiting on them wait for their next event", "class", obj.GetName())
	}
	for i := range pools.Items {
		keys = append(keys, "pool/"+pools.Items[i].Name)
	}
	return r.waitingClaims(ctx, keys)
}

// poolToWaitingClaims wakes the claims that name a pool that appeared or
// changed.
func (r *Reconciler) poolToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waitingClaims(ctx, []string{"pool/" + obj.GetName()})
}

// namespaceToWaitingClaims wakes the unbound claims of a namespace whose
// labels changed: a class's tenancy.allowedNamespaces may now match it.
func (r *Reconciler) namespaceToWaitingClaims(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waitingClaimsIn(ctx, obj.GetName())
}

// waitingClaimsIn lists the unbound claims of a namespace.
func (r *Reconciler) waitingClaimsIn(ctx context.Context, namespace string) []reconcile.Request {
	var claims macvirtv1alpha1.MacClaimList
	if err := r.List(ctx, &claims, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing a namespace's claims; its waiting claims wait for their next event", "namespace", namespace)
		return nil
	}
	var reqs []reconcile.Request
	for i := range claims.Items {
		if state.ClaimWaiting(&claims.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&claims.Items[i])})
		}
	}
	return reqs
}

// patchClaimStatus writes the status computed from the scope, only if it
// changed, and records the events of what changed. It writes nothing else.
func (r *Reconciler) patchClaimStatus(ctx context.Context, s *claimScope) error {
	c := s.claim
	st := computeClaimStatus(s, metav1.NewTime(r.Clock.Now()))
	if equality.Semantic.DeepEqual(c.Status, st) {
		return nil
	}
	before := c.DeepCopy()
	oldPhase := c.Status.Phase
	c.Status = st
	// Every write is guarded by the claim's resourceVersion: the status
	// carries the binding protocol's reservation, which a status computed
	// from a stale copy must never overwrite.
	if written, err := base.WriteStatus(ctx, r.Client, c, before, true); !written {
		return err
	}
	if before.Status.BoundAt == nil && st.BoundAt != nil {
		metrics.ClaimBindSeconds.Observe(st.BoundAt.Sub(c.CreationTimestamp.Time).Seconds())
	}
	if before.Status.ReadyAt == nil && st.ReadyAt != nil {
		metrics.ClaimReadySeconds.Observe(st.ReadyAt.Sub(c.CreationTimestamp.Time).Seconds())
	}
	if oldPhase != st.Phase {
		r.recordClaimPhase(c)
	}
	r.recordBootstrap(c, before.Status.Conditions, st.Conditions)
	// A refused write and a lost machine have their Warning events already.
	if reason, note, ok := base.TurnedStalled(before.Status.Conditions, st.Conditions); ok && s.writeFailed == nil && st.Phase != macvirtv1alpha1.ClaimLost {
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, reason, "Claim", note)
	}
	if reason, note, ok := drain.Warning(before.Status.Conditions, st.Conditions); ok {
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, reason, "Drain", note)
	}
	return nil
}

func (r *Reconciler) recordClaimPhase(c *macvirtv1alpha1.MacClaim) {
	// Bound and Ready are not events: the status and the claim metrics
	// (macvirt_claim_bind_seconds, macvirt_claim_ready_seconds) say them,
	// as the PersistentVolume binder records none on success. A lost
	// machine is a Warning.
	if c.Status.Phase != macvirtv1alpha1.ClaimLost {
		return
	}
	note := string(c.Status.Phase)
	if rc := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
		note = rc.Message
	}
	base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, "ClaimLost", "Bind", note)
}

// recordBootstrap tells of a bootstrap that turned out one way or the
// other: a Warning event when it failed, timed out or cannot run (an old
// agent), and the count by result.
func (r *Reconciler) recordBootstrap(c *macvirtv1alpha1.MacClaim, before, after []metav1.Condition) {
	now := meta.FindStatusCondition(after, macvirtv1alpha1.ConditionBootstrapSucceeded)
	if now == nil {
		return
	}
	if was := meta.FindStatusCondition(before, macvirtv1alpha1.ConditionBootstrapSucceeded); was != nil && was.Reason == now.Reason {
		return
	}
	switch now.Reason {
	case macvirtv1alpha1.ReasonBootstrapSucceeded:
		// Counted, not an event: success is the common case.
	case macvirtv1alpha1.ReasonBootstrapFailed, macvirtv1alpha1.ReasonBootstrapTimedOut, macvirtv1alpha1.ReasonAgentTooOld:
		base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, bootstrapReadyReason(now.Reason), "Bootstrap", now.Message)
	default:
		return
	}
	metrics.ClaimBootstraps.WithLabelValues(now.Reason).Inc()
}
