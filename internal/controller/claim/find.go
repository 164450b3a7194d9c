package claim

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/index"
)

// findBound finds the machine bound to the claim: the one its status names,
// or, before the status records it (this process has just bound it, or a
// restart came between the machine's write and the claim's), the one whose
// claimRef carries the claim's UID. A named machine that is gone, bound to
// another UID, or Failed makes the claim Lost; it is never re-bound. Other
// machines bound to the claim than the one its status names are recorded
// as orphans. It only reads, and records what it found in the scope (and
// drops an assumed binding the cache has caught up with); a binding in
// progress is left to completeBinding, orphans to deleteOrphans.
func (r *Reconciler) findBound(ctx context.Context, s *claimScope) (bool, error) {
	var listed macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &listed, client.MatchingFields{index.MachineClaimUID: string(s.claim.UID)}); err != nil {
		return false, fmt.Errorf("listing the machines bound to claim %s/%s: %w", s.claim.Namespace, s.claim.Name, err)
	}
	now := r.now()
	if m, at, ok := r.assumed.Get(s.claim.UID, now); ok {
		// This process bound it; the cache may not show it yet. One the
		// cache shows gone (deleted since) is not assumed any more.
		err := r.Get(ctx, client.ObjectKeyFromObject(m), &macvirtv1alpha1.MacMachine{})
		switch {
		case apierrors.IsNotFound(err):
			r.assumed.Forget(s.claim.UID)
		case err != nil:
			return false, fmt.Errorf("getting machine %s/%s: %w", m.Namespace, m.Name, err)
		default:
			s.boundAt = at
			if !slices.ContainsFunc(listed.Items, func(l macvirtv1alpha1.MacMachine) bool { return l.UID == m.UID }) {
				listed.Items = append(listed.Items, *m)
			}
		}
	}
	if s.claim.Status.BoundAt != nil {
		// The status records the binding: the cache is the authority now.
		r.assumed.Forget(s.claim.UID)
	}
	won, err := r.mayServe(ctx, s.claim.Namespace, listed.Items)
	if err != nil {
		return false, err
	}
	if bindingInProgress(s.claim) {
		// The machine's side may not be written yet (a crash, or another
		// operator in the middle): completeBinding takes it from here.
		return true, nil
	}
	ref := s.claim.Status.MachineRef
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
	s.orphans = orphansOf(ref, won)
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

// orphansOf is, of the machines bound to a claim, those its status (ref)
// does not name and that are not being deleted already: two operators each
// bound one, and only one was recorded.
func orphansOf(ref *macvirtv1alpha1.ObjectRef, bound []*macvirtv1alpha1.MacMachine) []*macvirtv1alpha1.MacMachine {
	var out []*macvirtv1alpha1.MacMachine
	for _, m := range bound {
		if m.UID != ref.UID && m.DeletionTimestamp.IsZero() {
			out = append(out, m)
		}
	}
	return out
}
