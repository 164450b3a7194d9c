// Package tenancy is the one statement of which claims a MacClass admits:
// the admission webhook refuses a claim with it, and the claim controller
// keeps a claim waiting with it (a namespace's labels or the class can
// change after admission), so the two never disagree.
package tenancy

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Refusal says why a class does not admit a claim: a condition reason, a
// message naming the fix, and the claim field it is about.
type Refusal struct {
	Reason  string
	Message string
	// Field is the claim's field the refusal is about, as a path
	// ("metadata.namespace", "spec.reclaimPolicy").
	Field string
}

// Check says whether class admits a claim of reclaimPolicy policy from the
// namespace named namespace with nsLabels; nil when it does. A class whose
// allowedNamespaces cannot be parsed admits nobody: its own status says why.
func Check(class *macvirtv1alpha1.MacClass, namespace string, nsLabels map[string]string, policy macvirtv1alpha1.ReclaimPolicy) *Refusal {
	t := class.Spec.Tenancy
	if sel := t.AllowedNamespaces; sel != nil && (len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) > 0) {
		selector, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return &Refusal{macvirtv1alpha1.ReasonInvalidClass,
				fmt.Sprintf("MacClass %s has an invalid spec.tenancy.allowedNamespaces: %v", class.Name, err), "spec.className"}
		}
		if !selector.Matches(labels.Set(nsLabels)) {
			return &Refusal{macvirtv1alpha1.ReasonNamespaceNotAllowed, fmt.Sprintf(
				"namespace %q may not claim MacClass %s: its labels do not match the class's spec.tenancy.allowedNamespaces (%s); "+
					"ask an admin to label the namespace or use another class", namespace, class.Name, selector), "metadata.namespace"}
		}
	}
	if policy == macvirtv1alpha1.ReclaimRetain && t.AllowRetain != nil && !*t.AllowRetain {
		return &Refusal{macvirtv1alpha1.ReasonRetainNotAllowed, fmt.Sprintf(
			"MacClass %s does not allow reclaimPolicy Retain (spec.tenancy.allowRetain is false); use Delete or another class",
			class.Name), "spec.reclaimPolicy"}
	}
	return nil
}

// ReleasedFull says whether a namespace that retains released machines of
// class (released ones, and those bound under Retain, which will be) may
// retain one more; nil when it may.
func ReleasedFull(class *macvirtv1alpha1.MacClass, namespace string, released int) *Refusal {
	limit := class.Spec.Tenancy.MaxReleasedPerNamespace
	if limit == nil || released < int(*limit) {
		return nil
	}
	return &Refusal{macvirtv1alpha1.ReasonTooManyReleased, fmt.Sprintf(
		"namespace %q already retains %d machines of MacClass %s (released, or bound with reclaimPolicy Retain), its "+
			"spec.tenancy.maxReleasedPerNamespace; delete a released one (kubectl get macmachines -A -l %s=true) or claim with reclaimPolicy Delete",
		namespace, released, class.Name, macvirtv1alpha1.LabelReleased), "spec.reclaimPolicy"}
}

// Which machine may serve which claim. Admission keeps anyone but the
// operator from writing what binds a machine (its claimRef, pool label and
// owner references); these say what the controllers and the agent endpoint
// accept even so, so a machine that got such fields some other way (made
// before admission checked them, or while it was not installed) serves no
// claim it was not made for.

// PoolHolds reports whether an unbound machine is one the pool made and
// still holds: labelled for it, in the pool's namespace, and controlled by
// the pool itself (its kind and UID). Only such a machine is handed to a
// claim; one made by anyone else, wherever it lives and however it is
// labelled, never is.
func PoolHolds(pool *macvirtv1alpha1.MacPool, m *macvirtv1alpha1.MacMachine) bool {
	if pool == nil || m.Labels[macvirtv1alpha1.LabelPool] != pool.Name || m.Namespace != pool.Spec.Namespace {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(m)
	return ref != nil && ref.Kind == "MacPool" && ref.UID == pool.UID && ref.APIVersion == macvirtv1alpha1.GroupVersion.String()
}

// PoolServes reports whether the pool's idle machines are for the claim. A
// pool a runner set or a Buildkite queue keeps warm for its own runners
// (it carries the set's or the queue's labels) serves only that set's or
// queue's claims, which name it: its Macs are there for that set's next
// jobs, and a claim by class (a tenant's, or another set's), or one naming
// the pool from anywhere (its name is predictable), taking them would leave
// those jobs waiting for a boot. Any other pool serves the claims of its
// class and those naming it.
func PoolServes(pool *macvirtv1alpha1.MacPool, claim *macvirtv1alpha1.MacClaim) bool {
	if kind, ns, name := PoolKeptFor(pool); kind != "" {
		label := macvirtv1alpha1.LabelRunnerSet
		if kind == "MacBuildkiteQueue" {
			label = macvirtv1alpha1.LabelBuildkiteQueue
		}
		return claim.Spec.PoolName == pool.Name && claim.Namespace == ns && claim.Labels[label] == name
	}
	if claim.Spec.PoolName != "" {
		return claim.Spec.PoolName == pool.Name
	}
	return true
}

// PoolKeptFor names the runner set or Buildkite queue whose warm pool the
// pool is (its kind, namespace and name); the kind is empty for any other
// pool.
func PoolKeptFor(pool *macvirtv1alpha1.MacPool) (kind, namespace, name string) {
	l := pool.Labels
	switch {
	case l[macvirtv1alpha1.LabelRunnerSet] != "":
		return "MacRunnerSet", l[macvirtv1alpha1.LabelRunnerSetNamespace], l[macvirtv1alpha1.LabelRunnerSet]
	case l[macvirtv1alpha1.LabelBuildkiteQueue] != "":
		return "MacBuildkiteQueue", l[macvirtv1alpha1.LabelBuildkiteQueueNamespace], l[macvirtv1alpha1.LabelBuildkiteQueue]
	}
	return "", "", ""
}

// MayServe reports whether a machine can be the machine of claims of the
// namespace: one made on demand in that namespace, or a pool's machine in
// that pool's namespace (pool is the pool its label names, nil when none
// or it does not exist). A bound pool machine no longer has its pool as
// owner (binding removes it), so only its place is checked.
func MayServe(m *macvirtv1alpha1.MacMachine, namespace string, pool *macvirtv1alpha1.MacPool) bool {
	if m.Namespace == namespace {
		return true
	}
	return pool != nil && m.Labels[macvirtv1alpha1.LabelPool] == pool.Name && m.Namespace == pool.Spec.Namespace
}

// Access decides the access type a claim of class gets: the type it asks
// for (asked), or the class's spec.access.defaultType when it asks for none,
// when the class allows it (spec.tenancy.allowedAccessTypes). A type the
// class does not allow is refused: the admission webhook refuses the claim
// with the Refusal, and a claim admitted before its class changed gets
// ClusterIP, saying why. Without a class, ClusterIP, refusing any other
// type asked for. The claim's Service and its machine's NetworkPolicy both
// follow this one decision.
func Access(class *macvirtv1alpha1.MacClass, asked macvirtv1alpha1.AccessType) (macvirtv1alpha1.AccessType, *Refusal) {
	if class == nil {
		if asked == "" || asked == macvirtv1alpha1.AccessClusterIP {
			return macvirtv1alpha1.AccessClusterIP, nil
		}
		return macvirtv1alpha1.AccessClusterIP, &Refusal{macvirtv1alpha1.ReasonAccessTypeNotAllowed, fmt.Sprintf(
			"spec.access.type %s needs a MacClass that allows it, and the claim's MacClass does not exist; ask an admin", asked),
			"spec.access.type"}
	}
	want := asked
	if want == "" {
		want = class.DefaultAccess()
	}
	if class.Spec.Tenancy.AllowsAccess(want) {
		return want, nil
	}
	return macvirtv1alpha1.AccessClusterIP, &Refusal{macvirtv1alpha1.ReasonAccessTypeNotAllowed, fmt.Sprintf(
		"MacClass %s allows spec.access.type %v only (its spec.tenancy.allowedAccessTypes); use one of those or ask an admin",
		class.Name, class.Spec.Tenancy.AccessTypes()), "spec.access.type"}
}
