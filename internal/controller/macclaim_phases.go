package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// The claim's steps: find the machine it is bound to, or bind one. Each
// records in the claimScope what it found, what it waits for, and what the
// API server refused.

// findBound finds the machine bound to the claim: the one its status names,
// or, after a restart between the two binding writes, the one whose
// claimRef carries the claim's UID. A named machine that is gone, bound to
// another UID, or Failed makes the claim Lost; it is never re-bound.
func (r *MacClaimReconciler) findBound(ctx context.Context, s *claimScope) (bool, error) {
	var listed macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &listed, client.MatchingFields{claimUIDField: string(s.claim.UID)}); err != nil {
		return false, fmt.Errorf("listing the machines bound to claim %s/%s: %w", s.claim.Namespace, s.claim.Name, err)
	}
	won, err := r.mayServe(ctx, s.claim.Namespace, listed.Items)
	if err != nil {
		return false, err
	}
	ref := s.claim.Status.MachineRef
	switch {
	case bindingInProgress(s.claim) && ref != nil:
		// The claim reserved this machine and the machine's side may not
		// be written yet (a crash, or another operator in the middle).
		return r.completeBind(ctx, s)
	case bindingInProgress(s.claim):
		// The claim is committed to a machine of its own, made on demand.
		return r.bindOnDemand(ctx, s)
	}
	if ref == nil {
		// A machine created for the claim on demand (pre-bound), or bound
		// by an operator that wrote the machine's side first: adopt it. The
		// lowest name, so every operator adopts the same one.
		for _, m := range won {
			if s.machine == nil || m.Name < s.machine.Name {
				s.machine = m
			}
		}
		return true, nil
	}
	if err := r.deleteOrphans(ctx, s.claim, ref, won); err != nil {
		return false, err
	}
	m := &macvirtv1alpha1.MacMachine{}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	err = r.Get(ctx, key, m)
	if apierrors.IsNotFound(err) || (err == nil && (m.UID != ref.UID || m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != s.claim.UID)) {
		// The cache may lag behind the binding (the claim's and the
		// machine's watches are not ordered); only the API server can say
		// the machine is gone or not this claim's.
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
		// A binding made before admission guarded claimRef and the pool
		// label (or while it was not installed) may name a machine made by
		// hand: it is not the claim's, and never gets its keys.
		served, err := r.mayServe(ctx, s.claim.Namespace, []macvirtv1alpha1.MacMachine{*m})
		if err != nil {
			return false, err
		}
		if len(served) == 0 {
			s.lost = fmt.Sprintf("machine %s was not made for this claim: it is neither in the claim's namespace nor a pool's machine "+
				"in that pool's namespace", key)
			return true, nil
		}
		s.machine = m
	}
	return true, nil
}

// mayServe keeps, of the machines whose claimRef names a claim of the
// namespace, those that can be its own (tenancy.MayServe); any other is
// ignored, loudly.
func (r *MacClaimReconciler) mayServe(ctx context.Context, namespace string,
	listed []macvirtv1alpha1.MacMachine) ([]*macvirtv1alpha1.MacMachine, error) {
	pools := poolLookup{}
	out := make([]*macvirtv1alpha1.MacMachine, 0, len(listed))
	for i := range listed {
		m := &listed[i]
		pool, err := pools.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
		if err != nil {
			return nil, err
		}
		if !tenancy.MayServe(m, namespace, pool) {
			ctrl.LoggerFrom(ctx).Info("ignoring a machine that names a claim of the namespace but was made neither there nor by a pool",
				"machine", client.ObjectKeyFromObject(m), "namespace", namespace)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// poolLookup reads pools by name once per reconcile; nil for no name or a
// pool that does not exist.
type poolLookup map[string]*macvirtv1alpha1.MacPool

func (l poolLookup) get(ctx context.Context, c client.Reader, name string) (*macvirtv1alpha1.MacPool, error) {
	if name == "" {
		return nil, nil
	}
	if p, ok := l[name]; ok {
		return p, nil
	}
	p := &macvirtv1alpha1.MacPool{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting MacPool %s: %w", name, err)
		}
		p = nil
	}
	l[name] = p
	return p, nil
}

// deleteOrphans deletes machines bound to this claim that its status does
// not name: two operators each bound one, and only one was recorded. The
// orphan was never handed to the tenant, and its claimRef cannot change, so
// it goes (with its resourceVersion as precondition) and its pool replaces it.
func (r *MacClaimReconciler) deleteOrphans(ctx context.Context, claim *macvirtv1alpha1.MacClaim, ref *macvirtv1alpha1.ObjectRef,
	bound []*macvirtv1alpha1.MacMachine) error {
	for _, m := range bound {
		if m.UID == ref.UID || !m.DeletionTimestamp.IsZero() {
			continue
		}
		uid, rv := m.UID, m.ResourceVersion
		if err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv}); apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("deleting orphaned machine %s/%s: %w", m.Namespace, m.Name, err)
		}
		// The binding protocol makes this impossible; it stays as a last
		// line of defence, loud, because each one burns a warm Mac.
		ctrl.LoggerFrom(ctx).Info("deleted a machine bound twice to the claim", "machine", m.Name, "kept", ref.Name)
		orphansDeleted.Inc()
		recordEvent(r.Recorder, claim, corev1.EventTypeWarning, "OrphanDeleted", "Bind", fmt.Sprintf(
			"machine %s/%s was also bound to this claim; deleted it, keeping %s", m.Namespace, m.Name, ref.Name))
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
	retainBounded := reclaimPolicy(s.claim) == macvirtv1alpha1.ReclaimRetain && class.Spec.Tenancy.MaxReleasedPerNamespace != nil
	if retainBounded {
		// The count and the bind it allows happen under one lock, and the
		// bind is recorded before the lock is let go.
		retainKey := releasedKey(s.claim.Namespace, class.Name)
		unlock := r.retained.lock(retainKey)
		defer func() {
			if s.machine != nil {
				r.retained.record(retainKey, s.machine.UID, r.Clock.Now())
			}
			unlock()
		}()
	}
	if p, err := r.checkTenancy(ctx, s.claim, class); err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	// The cache's own objects, not copies: a pool may hold a thousand idle
	// machines, and copying each one for every bind would make a bind cost
	// as much as the pool is large. They are only read here; the machine
	// tried is copied before anything is written.
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.MatchingFields{bindableField: bindKey(s.claim)}, client.UnsafeDisableDeepCopy); err != nil {
		return false, fmt.Errorf("listing idle machines for %s: %w", bindKey(s.claim), err)
	}
	candidates := make([]*macvirtv1alpha1.MacMachine, 0, len(list.Items))
	for i := range list.Items {
		candidates = append(candidates, &list.Items[i])
	}
	// Checked in the order they are tried, so a bind looks closer only at
	// the machines it tries, usually one.
	pools, held := poolLookup{}, 0
	for m := range candidateOrder(s.claim.UID, candidates) {
		pool, err := pools.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
		if err != nil {
			return false, err
		}
		if !tenancy.PoolHolds(pool, m) {
			ctrl.LoggerFrom(ctx).Info("skipping a machine labelled for a pool that did not make it", "machine", client.ObjectKeyFromObject(m))
			continue
		}
		held++
		key := client.ObjectKeyFromObject(m)
		if !r.inFlight.reserve(key, r.Clock.Now()) {
			continue
		}
		won, err := r.bindMachine(ctx, s, m.DeepCopy())
		if !won {
			r.inFlight.release(key)
		}
		if err != nil || won {
			return won, err
		}
	}
	if onDemand(s.claim, class) {
		return r.createOnDemand(ctx, s)
	}
	s.waiting = &problem{macvirtv1alpha1.ReasonWaitingForMachine, fmt.Sprintf("no idle machine in %s yet", bindKey(s.claim))}
	// Every candidate taken by another claim (or changed) under us means
	// the cache may still list machines that are free: try again soon.
	s.retrySoon = held > 0
	return true, nil
}

func reclaimPolicy(claim *macvirtv1alpha1.MacClaim) macvirtv1alpha1.ReclaimPolicy {
	if claim.Spec.ReclaimPolicy == "" {
		return macvirtv1alpha1.ReclaimDelete
	}
	return claim.Spec.ReclaimPolicy
}

// onDemand reports whether the claim gets a machine of its own when no
// idle one is free.
func onDemand(claim *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) bool {
	return claim.Spec.PoolName == "" && class.Spec.Tenancy.OnDemand != nil && *class.Spec.Tenancy.OnDemand
}

// bindOnDemand completes a claim's commitment to a machine made on demand,
// from the claim's class.
func (r *MacClaimReconciler) bindOnDemand(ctx context.Context, s *claimScope) (bool, error) {
	class, p, err := r.resolveClass(ctx, s.claim)
	if err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	s.class = class
	// The class or the namespace may have changed since the claim
	// committed: create nothing they no longer allow. The commitment stays
	// (another operator may be creating this very machine); the claim says
	// why it waits.
	if !onDemand(s.claim, class) {
		s.waiting = &problem{macvirtv1alpha1.ReasonWaitingForMachine,
			fmt.Sprintf("committed to a machine made on demand, which MacClass %s no longer allows (tenancy.onDemand)", class.Name)}
		return false, nil
	}
	if p, err := r.checkTenancy(ctx, s.claim, class); err != nil || p != nil {
		s.waiting = p
		return false, err
	}
	return r.createOnDemand(ctx, s)
}

// createOnDemand creates a machine in the claim's namespace, pre-bound to
// it. The claim commits to it first (Bound=False reason Binding, naming no
// machine: its UID is not known yet), under the claim's resourceVersion
// like any reservation; its name is the claim's own, so a second creator
// meets the first one's machine. It is owned by the claim under the Delete
// policy only, so a cluster's garbage collector never deletes a Retained
// machine.
func (r *MacClaimReconciler) createOnDemand(ctx context.Context, s *claimScope) (bool, error) {
	claim := s.claim
	if !bindingInProgress(claim) {
		if err := r.writeReservation(ctx, s, nil, macvirtv1alpha1.ReasonBinding,
			fmt.Sprintf("creating MacMachine %s/%s for this claim", claim.Namespace, onDemandName(claim))); err != nil {
			return false, err
		}
	}
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
	// A paused or stale writer must not create a machine for a claim that
	// has moved on (bound since, lost, or gone): the API server's copy of
	// the claim must still be committed to it.
	fresh := &macvirtv1alpha1.MacClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), fresh); err != nil {
		return false, fmt.Errorf("reading claim %s/%s before creating its machine: %w", claim.Namespace, claim.Name, err)
	}
	if fresh.UID != claim.UID || !bindingInProgress(fresh) || fresh.Status.MachineRef != nil {
		return false, apierrors.NewConflict(macvirtv1alpha1.GroupVersion.WithResource("macclaims").GroupResource(), claim.Name,
			fmt.Errorf("the claim is no longer committed to a machine made on demand"))
	}
	err := r.Create(ctx, m)
	if apierrors.IsAlreadyExists(err) {
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, fmt.Errorf("getting on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		}
	} else if err != nil {
		// A quota, an admission webhook or policy, or a webhook that is
		// down: the tenant sees the API server's words on the claim.
		// The claim stays committed (another operator may be creating the
		// same machine this instant) and tries again after backoff.
		err = fmt.Errorf("creating on-demand machine %s/%s: %w", m.Namespace, m.Name, err)
		s.writeFailed = &problem{macvirtv1alpha1.ReasonCreateFailed, err.Error()}
		recordEvent(r.Recorder, claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Bind", err.Error())
		return false, err
	}
	if m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != claim.UID {
		// A machine of that name made by someone else: it is not this
		// claim's, and never will be.
		if _, err := r.undoReservation(ctx, s, fmt.Sprintf("machine %s exists and belongs to another claim", m.Name)); err != nil {
			return false, err
		}
		s.retrySoon = false
		s.waiting = &problem{macvirtv1alpha1.ReasonWaitingForMachine, fmt.Sprintf("machine %s exists and belongs to another claim", m.Name)}
		return true, nil
	}
	ctrl.LoggerFrom(ctx).Info("created on-demand machine", "machine", m.Name)
	s.machine, s.retrySoon = m, false
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
	counted, err := r.mayServe(ctx, claim.Namespace, released.Items)
	if err != nil {
		return nil, err
	}
	uids := make([]types.UID, 0, len(counted))
	seen := make(map[types.UID]bool, len(counted))
	for _, m := range counted {
		uids = append(uids, m.UID)
		seen[m.UID] = true
	}
	count := r.retained.count(releasedKey(claim.Namespace, class.Name), uids, r.Clock.Now())
	pending, err := r.retainsInProgress(ctx, claim, class.Name)
	if err != nil {
		return nil, err
	}
	for _, uid := range pending {
		if !seen[uid] {
			count++
		}
	}
	if refusal := tenancy.ReleasedFull(class, claim.Namespace, count); refusal != nil {
		return &problem{refusal.Reason, refusal.Message}, nil
	}
	return nil, nil
}

// retainsInProgress lists, for the Retain bound of claim's namespace and
// class, the bindings other Retain claims there have begun and not
// recorded: each reserved machine's UID, or the committed claim's own UID
// for a machine still to be made on demand. A binding begun by another
// worker or operator (or before a crash) counts before it completes.
func (r *MacClaimReconciler) retainsInProgress(ctx context.Context, claim *macvirtv1alpha1.MacClaim, class string) ([]types.UID, error) {
	var claims macvirtv1alpha1.MacClaimList
	if err := r.List(ctx, &claims, client.InNamespace(claim.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the claims of namespace %s: %w", claim.Namespace, err)
	}
	var out []types.UID
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.UID == claim.UID || reclaimPolicy(c) != macvirtv1alpha1.ReclaimRetain || !bindingInProgress(c) {
			continue
		}
		ref := c.Status.MachineRef
		if ref == nil {
			if c.Spec.ClassName == class {
				out = append(out, c.UID)
			}
			continue
		}
		m := &macvirtv1alpha1.MacMachine{}
		if err := getOptional(ctx, r.Client, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
			return nil, err
		}
		if m.Name != "" && m.Spec.ClassName == class {
			out = append(out, ref.UID)
		}
	}
	return out, nil
}
