package claim

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
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// The binding protocol. A claim holds at most one machine at any moment:
//
//  1. The machine's claimRef is written, with the machine's
//     resourceVersion: of two claims after the same machine, only one
//     gets it, and claimRef is set once and never changes. This process
//     remembers the binding (assumed, by claim UID) until the claim's
//     status records it, so no later reconcile of the claim, its cache
//     lagging, binds a second machine.
//  2. The claim's status records the binding (Bound=True), usually in the
//     same write that says it is Ready.
//
// A claim found between 1 and 2 (a crash, another operator at work) adopts
// the machine whose claimRef names it (findBound): the binding is
// completed, never repeated. Two operators during a leader hand-over try
// the same machine first (candidateOrder), so the second meets the first
// one's binding and adopts it; only when their caches disagree about which
// machines are idle can both bind one, and then the status names one and
// the other is deleted as an orphan, loudly (an event and
// macvirt_claim_orphans_deleted_total).
//
// Operators before this protocol reserved the machine in the claim's
// status first (machineRef with Bound=False, reason Binding). A claim left
// so (an upgrade in the middle of a binding) is completed when its machine
// is still free or already names it, and undone only when the machine can
// never name it: gone, replaced, being deleted, or bound to another claim.
// A claim made on demand still commits in its status before its machine
// is created (the machine is new, and named after the claim).

// bindMachine writes the claim's binding into an idle machine. It reports
// whether the claim got it; a machine taken meanwhile is simply not the
// claim's, and the next one is tried.
func (r *Reconciler) bindMachine(ctx context.Context, s *claimScope, m *macvirtv1alpha1.MacMachine) (bool, error) {
	won, err := r.claimMachine(ctx, s.claim, m)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) {
			// An admission webhook or policy refused the binding, or a
			// webhook is down: the tenant sees the API server's words.
			s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonUpdateFailed, Message: err.Error()}
			base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Bind", err.Error())
		}
		return false, err
	case !won:
		return false, nil
	}
	now := r.now()
	r.assumed.Assume(s.claim.UID, m.DeepCopy(), now, assumeTTL)
	s.machine, s.boundAt, s.retrySoon = m, now, false
	return true, nil
}

// deleteOrphans deletes the machines findBound found bound to this claim
// besides the one its status names: two operators each bound one, and only
// one was recorded. The orphan was never handed to the tenant, and its
// claimRef cannot change, so it goes (with its UID and resourceVersion as
// preconditions: one changed since is looked at afresh) and its pool
// replaces it. The claim's steps go on either way.
func (r *Reconciler) deleteOrphans(ctx context.Context, s *claimScope) (bool, error) {
	ref := s.claim.Status.MachineRef
	if ref == nil {
		return true, nil
	}
	for _, m := range s.orphans {
		uid, rv := m.UID, m.ResourceVersion
		if err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv}); apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return false, fmt.Errorf("deleting orphaned machine %s/%s: %w", m.Namespace, m.Name, err)
		}
		// The binding protocol makes this impossible; it stays as a last
		// line of defence, loud, because each one burns a warm Mac.
		ctrl.LoggerFrom(ctx).Info("deleted a machine bound twice to the claim", "machine", m.Name, "kept", ref.Name)
		metrics.OrphansDeleted.Inc()
		base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, "OrphanDeleted", "Bind", fmt.Sprintf(
			"machine %s/%s was also bound to this claim; deleted it, keeping %s", m.Namespace, m.Name, ref.Name))
	}
	return true, nil
}

// completeBind resolves a claim whose status reserved a machine (an older
// operator's protocol) whose side of the binding was not seen: complete
// it, or undo it when it cannot be.
func (r *Reconciler) completeBind(ctx context.Context, s *claimScope) (bool, error) {
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
	}
	// A reservation made before the pool's own machines were told from
	// others may name a machine made by hand: never complete it.
	pool, err := poolLookup{}.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
	if err != nil {
		return false, err
	}
	switch {
	case m.Spec.ClaimRef == nil && !tenancy.PoolHolds(pool, m), !tenancy.MayServe(m, s.claim.Namespace, pool):
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s was not made by its pool for claims", key))
	case m.Spec.ClaimRef != nil && m.Spec.ClaimRef.UID == s.claim.UID:
		s.machine = m
		return true, nil
	case m.Spec.ClaimRef != nil:
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s was bound to another claim", key))
	case !m.DeletionTimestamp.IsZero():
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s is being deleted", key))
	case m.Status.Phase == macvirtv1alpha1.MachineFailed:
		// Failed is terminal, and claimMachine never binds a Failed
		// machine: no writer can still give it to this claim.
		return r.undoReservation(ctx, s, fmt.Sprintf("reserved machine %s failed", key))
	}
	return r.finishBind(ctx, s, m)
}

// finishBind writes the machine's side of a reservation an older operator
// made. A machine
// that can never be the claim's releases the reservation, and the claim
// looks again soon.
func (r *Reconciler) finishBind(ctx context.Context, s *claimScope, m *macvirtv1alpha1.MacMachine) (bool, error) {
	won, err := r.claimMachine(ctx, s.claim, m)
	switch {
	case err != nil:
		if !apierrors.IsConflict(err) {
			// An admission webhook or policy refused the binding, or a
			// webhook is down: the tenant sees the API server's words. The
			// reservation stays; the next attempt starts from it.
			s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonUpdateFailed, Message: err.Error()}
			base.RecordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Bind", err.Error())
		}
		return false, err
	case won:
		s.machine = m
		s.retrySoon = false
		return true, nil
	}
	if _, err := r.undoReservation(ctx, s, fmt.Sprintf("machine %s/%s was taken by another claim", m.Namespace, m.Name)); err != nil {
		return false, err
	}
	return false, nil
}

// undoReservation clears the claim's reservation of a machine that can
// never be its own; the claim then looks for another.
func (r *Reconciler) undoReservation(ctx context.Context, s *claimScope, why string) (bool, error) {
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
func (r *Reconciler) writeReservation(ctx context.Context, s *claimScope, ref *macvirtv1alpha1.ObjectRef, reason, msg string) error {
	c := s.claim
	before := c.DeepCopy()
	c.Status.MachineRef = ref
	c.Status.Phase = macvirtv1alpha1.ClaimPending
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
		Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	written, err := base.WriteStatus(ctx, r.Client, c, before, true)
	if err != nil {
		*c = *before
		if !apierrors.IsConflict(err) {
			s.writeFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonUpdateFailed, Message: err.Error()}
			base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Bind", err.Error())
		}
		return err
	}
	if !written {
		// The claim is gone (the cache still showed it): nothing may be
		// bound or created for it.
		*c = *before
		return apierrors.NewNotFound(macvirtv1alpha1.GroupVersion.WithResource("macclaims").GroupResource(), c.Name)
	}
	return nil
}

// lostRaceRetry is how soon a claim that lost every race looks again.
const lostRaceRetry = 10 * time.Millisecond

// claimMachine writes the machine side of the binding in one update that
// carries the machine's resourceVersion: claimRef, the reclaim policy, and
// no pool owner reference (deleting the pool must not delete a tenant's
// machine). On a conflict it reads the machine from the API server: bound
// to this claim already (by another operator) means won; bound to another
// claim, gone, replaced, being deleted or Failed means lost, for good; still free
// means one more try with the fresh copy, then the conflict is returned.
// Lost is only ever said of a machine that can never be the claim's.
func (r *Reconciler) claimMachine(ctx context.Context, claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) (bool, error) {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		b := bindingOf(claim, m)
		err = r.Update(ctx, b)
		switch {
		case err == nil:
			*m = *b
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
		if fresh.UID != m.UID || !fresh.DeletionTimestamp.IsZero() || fresh.Status.Phase == macvirtv1alpha1.MachineFailed {
			return false, nil
		}
		// Still free (its readiness may have changed; a bound machine may
		// go unready too), so try again with the fresh copy.
		*m = *fresh
	}
	// Still free after every try: the conflict sends the claim round again.
	return false, fmt.Errorf("binding machine %s/%s: %w", m.Namespace, m.Name, err)
}
