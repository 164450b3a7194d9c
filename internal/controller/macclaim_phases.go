package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
	var won macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &won, client.MatchingFields{claimUIDField: string(s.claim.UID)}); err != nil {
		return false, fmt.Errorf("listing the machines bound to claim %s/%s: %w", s.claim.Namespace, s.claim.Name, err)
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
		won, err := r.bindMachine(ctx, s, m)
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
	s.retrySoon = len(candidates) > 0
	return true, nil
}

// The binding protocol. A claim holds at most one machine at any moment:
//
//  1. The claim's status names the machine first (machineRef, Bound=False
//     reason Binding), written with the claim's resourceVersion. This is
//     the lock: of two operators (or two workers with stale copies)
//     binding the same claim, only one writes it, so only one machine is
//     ever reserved for a claim.
//  2. The machine's claimRef is written, with the machine's
//     resourceVersion; of two claims that reserved the same machine, only
//     one gets it.
//  3. The claim's status records the binding (Bound=True).
//
// A claim found between 1 and 3 (a crash, a paused operator, another
// operator at work) is completed when its machine is still free or already
// names it, and undone (machineRef cleared, under the claim's
// resourceVersion) only when the machine can never name it: gone,
// replaced, being deleted, or bound to another claim (claimRef is set once
// and never changes). So no machine is ever bound to a claim that names
// another, and none is deleted as an orphan.

// bindingInProgress reports whether the claim has reserved a machine (its
// status names it) or committed to creating one on demand (it names none),
// and the binding is not complete yet. Only completing it, or undoing it
// where it can never complete, may follow.
func bindingInProgress(c *macvirtv1alpha1.MacClaim) bool {
	b := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionBound)
	return b != nil && b.Status == metav1.ConditionFalse && b.Reason == macvirtv1alpha1.ReasonBinding
}

// bindMachine runs the protocol for an idle machine: reserve it in the
// claim's status, then write the machine's side. It reports whether the
// claim got it; a machine taken meanwhile is released from the claim.
func (r *MacClaimReconciler) bindMachine(ctx context.Context, s *claimScope, m *macvirtv1alpha1.MacMachine) (bool, error) {
	ref := &macvirtv1alpha1.ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	if err := r.writeReservation(ctx, s, ref, macvirtv1alpha1.ReasonBinding,
		fmt.Sprintf("reserved MacMachine %s/%s; binding it", m.Namespace, m.Name)); err != nil {
		return false, err
	}
	return r.finishBind(ctx, s, m)
}

// completeBind resolves a claim whose status names a machine whose side of
// the binding was not seen: complete it, or undo it when it cannot be.
func (r *MacClaimReconciler) completeBind(ctx context.Context, s *claimScope) (bool, error) {
	ref := s.claim.Status.MachineRef
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	m := &macvirtv1alpha1.MacMachine{}
	// Only the API server can say the machine is gone or taken.
	err := r.APIReader.Get(ctx, key, m)
	switch {
	case apierrors.IsNotFound(err):
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s is gone", key))
	case err != nil:
		return false, fmt.Errorf("getting reserved machine %s: %w", key, err)
	case m.UID != ref.UID:
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s was replaced", key))
	case m.Spec.ClaimRef != nil && m.Spec.ClaimRef.UID == s.claim.UID:
		s.machine = m
		return true, nil
	case m.Spec.ClaimRef != nil:
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s was bound to another claim", key))
	case !m.DeletionTimestamp.IsZero():
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s is being deleted", key))
	}
	return r.finishBind(ctx, s, m)
}

// finishBind writes the machine's side of a reserved binding. A machine
// that can never be the claim's releases the reservation, and the claim
// looks again soon.
func (r *MacClaimReconciler) finishBind(ctx context.Context, s *claimScope, m *macvirtv1alpha1.MacMachine) (bool, error) {
	won, err := r.claimMachine(ctx, s.claim, m)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) {
			// An admission webhook or policy refused the binding, or a
			// webhook is down: the tenant sees the API server's words. The
			// reservation stays; the next attempt starts from it.
			s.writeFailed = &problem{macvirtv1alpha1.ReasonUpdateFailed, err.Error()}
			recordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Bind", err.Error())
		}
		return false, err
	case won:
		s.machine = m
		return true, nil
	}
	if _, err := r.undoReservation(ctx, s, fmt.Sprintf("machine %s/%s was taken by another claim", m.Namespace, m.Name)); err != nil {
		return false, err
	}
	return false, nil
}

// undoReservation clears the claim's reservation of a machine that can
// never be its own; the claim then looks for another.
func (r *MacClaimReconciler) undoReservation(ctx context.Context, s *claimScope, why string) (bool, error) {
	if err := r.writeReservation(ctx, s, nil, macvirtv1alpha1.ReasonWaitingForMachine, why+"; looking for another"); err != nil {
		return false, err
	}
	ctrl.LoggerFrom(ctx).V(1).Info("released a reservation", "reason", why)
	s.retrySoon = true
	return false, nil
}

// writeReservation writes the claim's machineRef (nil to clear it) with
// Bound=False, guarded by the claim's resourceVersion: a conflict means
// another writer got there first, and the claim is looked at afresh.
func (r *MacClaimReconciler) writeReservation(ctx context.Context, s *claimScope, ref *macvirtv1alpha1.ObjectRef, reason, msg string) error {
	c := s.claim
	before := c.DeepCopy()
	c.Status.MachineRef = ref
	c.Status.Phase = macvirtv1alpha1.ClaimPending
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
		Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	if _, err := writeStatus(ctx, r.Client, c, before, true); err != nil {
		*c = *before
		if !apierrors.IsConflict(err) {
			s.writeFailed = &problem{macvirtv1alpha1.ReasonUpdateFailed, err.Error()}
			recordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Bind", err.Error())
		}
		return err
	}
	return nil
}

// conflictRetry is how soon a claim whose write met a newer version looks
// again: long enough for the cache to catch up.
const conflictRetry = 100 * time.Millisecond

// lostRaceRetry is how soon a claim that lost every race looks again.
const lostRaceRetry = 10 * time.Millisecond

// claimMachine writes the machine side of the binding in one update that
// carries the machine's resourceVersion: claimRef, the reclaim policy, and
// no pool owner reference (deleting the pool must not delete a tenant's
// machine). On a conflict it reads the machine from the API server: bound
// to this claim already (by another operator) means won; bound to another
// claim, gone, replaced or being deleted means lost, for good; still free
// means one more try with the fresh copy, then the conflict is returned.
// Lost is only ever said of a machine that can never be the claim's: the
// binding protocol undoes a reservation on it.
func (r *MacClaimReconciler) claimMachine(ctx context.Context, claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) (bool, error) {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		err = r.Update(ctx, bindingOf(claim, m))
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case apierrors.IsInvalid(err):
			// With the machine's resourceVersion current, only admission
			// (a webhook or policy) can refuse the binding: trying the next
			// machine would meet the same refusal, so it is reported.
			return false, fmt.Errorf("binding machine %s/%s was refused: %w", m.Namespace, m.Name, err)
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
		if fresh.UID != m.UID || !fresh.DeletionTimestamp.IsZero() {
			return false, nil
		}
		// Still free: the claim's reservation of it stands (readiness may
		// have changed; a bound machine may go unready too), so try again.
		m = fresh
	}
	// Still free after every try: the machine may yet be this claim's, so
	// the reservation must stand. The conflict sends the claim round again.
	return false, fmt.Errorf("binding machine %s/%s: %w", m.Namespace, m.Name, err)
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
	uids := make([]types.UID, 0, len(released.Items))
	for i := range released.Items {
		uids = append(uids, released.Items[i].UID)
	}
	count := r.retained.count(releasedKey(claim.Namespace, class.Name), uids, r.Clock.Now())
	if refusal := tenancy.ReleasedFull(class, claim.Namespace, count); refusal != nil {
		return &problem{refusal.Reason, refusal.Message}, nil
	}
	return nil, nil
}
