package claim

import (
	"hash/fnv"
	"iter"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// candidateOrder yields idle machines for one claim in rendezvous-hashing
// order: each machine's score is a hash of the claim's UID and the
// machine's name, highest first (ties by name). Concurrent claims thus
// start at different machines instead of all racing for the first one, and
// two operators reconciling the same claim with slightly different caches
// still put the same machine first, so they collide on one machine (one
// wins, the other adopts its binding) instead of binding two. Each machine
// is hashed once and the order is found as it is consumed: a bind that
// wins its first machine costs one pass over the pool, not a sort.
func candidateOrder(claimUID types.UID, machines []*macvirtv1alpha1.MacMachine) iter.Seq[*macvirtv1alpha1.MacMachine] {
	return func(yield func(*macvirtv1alpha1.MacMachine) bool) {
		type scored struct {
			m     *macvirtv1alpha1.MacMachine
			score uint64
		}
		left := make([]scored, 0, len(machines))
		for _, m := range machines {
			h := fnv.New64a()
			_, _ = h.Write([]byte(claimUID))
			_, _ = h.Write([]byte{0})
			_, _ = h.Write([]byte(m.Namespace + "/" + m.Name))
			left = append(left, scored{m, h.Sum64()})
		}
		for len(left) > 0 {
			best := 0
			for i := 1; i < len(left); i++ {
				if a, b := left[i], left[best]; a.score > b.score || (a.score == b.score && a.m.Name < b.m.Name) {
					best = i
				}
			}
			if !yield(left[best].m) {
				return
			}
			left[best] = left[len(left)-1]
			left = left[:len(left)-1]
		}
	}
}

// tieredOrder yields the idle machines a claim tries: running ones first
// (usable at once), then suspended ones whose MacHost has a free licence
// slot to resume them in; each tier in candidateOrder. A suspended machine
// on a full host is never tried: bound, it could only wait there for a
// slot, while another host's might free first. free is the free slots per
// host, for the hosts of suspended machines; skipped is how many were left
// out so.
func tieredOrder(claimUID types.UID, machines []*macvirtv1alpha1.MacMachine, free map[string]int) (yielded iter.Seq[*macvirtv1alpha1.MacMachine], skipped int) {
	tiers := make([][]*macvirtv1alpha1.MacMachine, 2)
	for _, m := range machines {
		switch {
		case m.Status.Phase != macvirtv1alpha1.MachineSuspended:
			tiers[0] = append(tiers[0], m)
		case free[m.Spec.HostName] > 0:
			tiers[1] = append(tiers[1], m)
		default:
			skipped++
		}
	}
	return func(yield func(*macvirtv1alpha1.MacMachine) bool) {
		for _, tier := range tiers {
			for m := range candidateOrder(claimUID, tier) {
				if !yield(m) {
					return
				}
			}
		}
	}, skipped
}

// onDemandName is the deterministic name of the machine a claim creates
// for itself: a recreated claim (new UID) gets a new name, a retried
// reconcile of the same claim gets the same one.
func onDemandName(claim *macvirtv1alpha1.MacClaim) string {
	base := claim.Name
	if len(base) > 54 {
		base = base[:54]
	}
	uid := strings.ReplaceAll(string(claim.UID), "-", "")
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return strings.TrimSuffix(base, "-") + "-" + uid
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

// bindingInProgress reports whether the claim has reserved a machine (its
// status names it) or committed to creating one on demand (it names none),
// and the binding is not complete yet. Only completing it, or undoing it
// where it can never complete, may follow.
func bindingInProgress(c *macvirtv1alpha1.MacClaim) bool {
	b := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionBound)
	return b != nil && b.Status == metav1.ConditionFalse && b.Reason == macvirtv1alpha1.ReasonBinding
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
