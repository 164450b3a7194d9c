package render

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// The claim controller reads a bound machine's policy with
// AdmitsNamespace: true exactly for the namespace NetworkPolicy lets in.
func TestAdmitsNamespace(t *testing.T) {
	class := &macvirtv1alpha1.MacClass{}
	class.Spec.Access.AllowedPeers = []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"team": "ops"}}}}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"}}
	bound := NetworkPolicy(class, m, Exposure{ClaimNamespace: "team"})
	external := NetworkPolicy(class, m, Exposure{ClaimNamespace: "team", External: true})
	unbound := NetworkPolicy(class, m, Exposure{})
	// A peer that names the namespace and more selects fewer pods.
	narrowed := bound.DeepCopy()
	narrowed.Spec.Ingress[0].From[0].PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	for name, tc := range map[string]struct {
		np   *networkingv1.NetworkPolicy
		ns   string
		want bool
	}{
		"bound to team":                          {bound, "team", true},
		"bound, external":                        {external, "team", true},
		"bound to team, asked other":             {bound, "other", false},
		"unbound":                                {unbound, "team", false},
		"peer narrowed to some pods":             {narrowed, "team", false},
		"the class's peer is no claim namespace": {bound, "ops", false},
	} {
		if got := AdmitsNamespace(tc.np, tc.ns); got != tc.want {
			t.Errorf("%s: AdmitsNamespace(%q) = %v; want %v", name, tc.ns, got, tc.want)
		}
	}
}
