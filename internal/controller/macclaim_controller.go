package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	// retained counts, per namespace and class, the machines this operator
	// has just bound under Retain, for maxReleasedPerNamespace.
	retained retainLedger
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macpools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// claimScope is what one reconcile of a claim observed and decided.
type claimScope struct {
	claim   *macvirtv1alpha1.MacClaim
	class   *macvirtv1alpha1.MacClass
	machine *macvirtv1alpha1.MacMachine
	lost    string
	waiting *problem
	// writeFailed is a create the API server refused, in its words, or a
	// read whose failure the status must show (the Node of a NodePort).
	writeFailed *problem
	// retrySoon says every idle machine tried was taken under us: look
	// again soon, without a status write (the cache is about to catch up).
	retrySoon bool
	// service is the claim's Service as it is; nil until it is written, or
	// while one of its name is not the claim's.
	service *corev1.Service
	// endpointsReady says the Service's EndpointSlice names the machine.
	endpointsReady bool
	// serviceProblem says why the Service is not as the claim asks.
	serviceProblem *problem
	// nodeAddress is the address of the machine's node, where a NodePort
	// Service reaches it; empty when unknown.
	nodeAddress string
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
		return deletingResult(markDeleting(ctx, r.Client, claim, &claim.Status.Conditions,
			"the claim is being deleted; its machine is released by its reclaimPolicy once it is gone"))
	}
	s := &claimScope{claim: claim}
	defer func() {
		if apierrors.IsConflict(reterr) {
			// A lost race or a stale copy, not a failure: look again once
			// the cache has caught up, without the growing backoff of an
			// error (a claim that lost many races would wait minutes).
			ctrl.LoggerFrom(ctx).V(1).Info("lost a race; looking again", "reason", reterr.Error())
			result, reterr = ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
	}()
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
		r.ensureService,
	} {
		if proceed, err := step(ctx, s); err != nil || !proceed {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
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
		Owns(&corev1.Service{}).
		Owns(&discoveryv1.EndpointSlice{}).
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
				if ref := m.Spec.ClaimRef; ref != nil && retains(m) {
					// Room for one more retained machine of that namespace.
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
		// Only names are taken: no copies of what may be many claims.
		var claims macvirtv1alpha1.MacClaimList
		if err := r.List(ctx, &claims, client.MatchingFields{claimWaitingField: k}, client.UnsafeDisableDeepCopy); err != nil {
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
	if err := r.List(ctx, &claims, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
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
