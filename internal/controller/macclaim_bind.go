package controller

import (
	"hash/fnv"
	"iter"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Field indexes on MacMachines used for binding.
const (
	// bindableField holds "class/<name>" and "pool/<name>" for every idle
	// pool machine a claim may take.
	bindableField = "macvirt.io/bindable"
	// claimUIDField holds spec.claimRef.uid, so a claim finds the machine it
	// won even before its own status records it.
	claimUIDField = "spec.claimRef.uid"
	// releasedField holds "<claim namespace>/<class>" for every machine
	// released or bound under Retain (each one will be left behind), so a
	// namespace's retained machines of a class are counted.
	releasedField = "macvirt.io/retained-for"
)

// retains reports whether the machine is released, or bound under Retain
// and so released once its claim goes.
func retains(m *macvirtv1alpha1.MacMachine) bool {
	return m.Labels[macvirtv1alpha1.LabelReleased] != "" ||
		m.Annotations[macvirtv1alpha1.AnnotationReclaimPolicy] == string(macvirtv1alpha1.ReclaimRetain)
}

// releasedKey is the releasedField value of a namespace's released machines
// of a class.
func releasedKey(namespace, class string) string { return namespace + "/" + class }

// bindableKeys indexes a machine that a claim may bind now: a pool's
// (labelled for it and controlled by it), unbound, never released, not
// being deleted, and Ready. Whether the pool really made it (its UID, its
// namespace) is checked against the pool when a claim takes it
// (tenancy.PoolHolds).
func bindableKeys(m *macvirtv1alpha1.MacMachine) []string {
	pool := m.Labels[macvirtv1alpha1.LabelPool]
	owner := metav1.GetControllerOfNoCopy(m)
	if pool == "" || owner == nil || owner.Kind != "MacPool" || owner.Name != pool || owner.APIVersion != macvirtv1alpha1.GroupVersion.String() ||
		m.Spec.ClaimRef != nil || m.Labels[macvirtv1alpha1.LabelReleased] != "" ||
		!m.DeletionTimestamp.IsZero() || m.Status.Phase != macvirtv1alpha1.MachineReady || !machineIsReady(m) {
		return nil
	}
	return []string{"class/" + m.Spec.ClassName, "pool/" + pool}
}

// claimWaiting reports whether a claim has no machine yet.
func claimWaiting(c *macvirtv1alpha1.MacClaim) bool { return c.Status.MachineRef == nil }

// bindKey is the bindable index key a claim looks up.
func bindKey(claim *macvirtv1alpha1.MacClaim) string {
	if claim.Spec.PoolName != "" {
		return "pool/" + claim.Spec.PoolName
	}
	return "class/" + claim.Spec.ClassName
}

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
