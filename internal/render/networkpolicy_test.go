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
