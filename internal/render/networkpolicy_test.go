package render

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestNetworkPolicyLetsInOnlyWhomTheBindingAllows(t *testing.T) {
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "ci-0", Namespace: "macvirt-pools", UID: "m1"}}

	idle := NetworkPolicy(class, m, Exposure{})
	if len(idle.Spec.Ingress) != 0 || len(idle.Spec.PolicyTypes) != 1 || idle.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("an unbound machine's policy: %+v, want ingress denied", idle.Spec)
	}
	if idle.Spec.PodSelector.MatchLabels[macvirtv1alpha1.LabelMachine] != "ci-0" || !metav1.IsControlledBy(idle, m) {
		t.Errorf("the policy selects %v and is owned by %v", idle.Spec.PodSelector, idle.OwnerReferences)
	}

	bound := NetworkPolicy(class, m, Exposure{ClaimNamespace: "team-a"})
	if len(bound.Spec.Ingress) != 1 || len(bound.Spec.Ingress[0].From) != 1 || len(bound.Spec.Ingress[0].Ports) != 1 ||
		bound.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "team-a" ||
		bound.Spec.Ingress[0].Ports[0].Port.IntVal != 22 {
		t.Errorf("a bound machine's policy: %+v, want SSH from team-a only", bound.Spec.Ingress)
	}

	class.Spec.Access.ScreenSharing = true
	class.Spec.Access.AllowedPeers = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}}
	open := NetworkPolicy(class, m, Exposure{ClaimNamespace: "team-a", External: true})
	from := open.Spec.Ingress[0].From
	if len(open.Spec.Ingress[0].Ports) != 2 || len(from) != 4 || from[1].IPBlock.CIDR != "192.0.2.0/24" ||
		from[2].IPBlock.CIDR != "0.0.0.0/0" || from[3].IPBlock.CIDR != "::/0" {
		t.Errorf("an exposed machine with Screen Sharing and a class peer: %+v", open.Spec.Ingress)
	}
}

// The tunnel's rule admits the operator's pods (both selectors in one peer:
// those pods of that namespace), on the machine's ports, once it is bound;
// an idle machine lets not even the operator in.
func TestNetworkPolicyLetsTheTunnelInOnceBound(t *testing.T) {
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	class.Spec.Access.ScreenSharing = true
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "ci-0", Namespace: "macvirt-pools", UID: "m1"}}
	peer := TunnelPeer("macvirt-system", map[string]string{"control-plane": "controller-manager"})
	if idle := NetworkPolicy(class, m, Exposure{Tunnel: peer}); len(idle.Spec.Ingress) != 0 {
		t.Errorf("an unbound machine lets in %+v", idle.Spec.Ingress)
	}
	bound := NetworkPolicy(class, m, Exposure{ClaimNamespace: "team-a", Tunnel: peer})
	if len(bound.Spec.Ingress) != 2 {
		t.Fatalf("a bound machine's rules: %+v, want the claim's namespace's and the tunnel's", bound.Spec.Ingress)
	}
	rule := bound.Spec.Ingress[1]
	if len(rule.From) != 1 || len(rule.Ports) != 2 || rule.Ports[0].Port.IntVal != 22 || rule.Ports[1].Port.IntVal != 5900 {
		t.Fatalf("the tunnel's rule: %+v, want one peer on SSH and Screen Sharing", rule)
	}
	p := rule.From[0]
	if p.NamespaceSelector == nil || p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "macvirt-system" ||
		p.PodSelector == nil || p.PodSelector.MatchLabels["control-plane"] != "controller-manager" || p.IPBlock != nil {
		t.Errorf("the tunnel's peer: %+v, want the operator's pods of its namespace only", p)
	}
	// The peer is copied: a change to the operator's does not reach policies.
	peer.PodSelector.MatchLabels["control-plane"] = "changed"
	if bound.Spec.Ingress[1].From[0].PodSelector.MatchLabels["control-plane"] != "controller-manager" {
		t.Error("the policy shares the operator's peer")
	}
}
