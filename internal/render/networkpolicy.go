package render

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// NetworkPolicyName is the name of a machine's NetworkPolicy.
func NetworkPolicyName(m *macvirtv1alpha1.MacMachine) string { return m.Name }

// Exposure is what a machine's NetworkPolicy lets in, decided by its claim.
type Exposure struct {
	// ClaimNamespace is the namespace of the claim the machine is bound to;
	// empty while it is unbound.
	ClaimNamespace string
	// External is true when the claim's Service reaches the machine from
	// outside the cluster (NodePort, LoadBalancer).
	External bool
	// Tunnel is the operator's pods, whose tunnel (internal/tunnel) brings
	// tenants through the API server to a bound machine's ports; nil when
	// the operator serves no tunnel.
	Tunnel *networkingv1.NetworkPolicyPeer
}

// NetworkPolicy is a machine's ingress policy, selecting its virt-launcher
// pod by the machine label KubeVirt copies from the instance to the pod. An
// unbound machine lets nothing in. A bound one lets in, on its SSH port
// (and Screen Sharing's when the class offers it), pods of its claim's
// namespace and the class's extra peers; from anywhere when the claim is
// exposed outside the cluster; and the operator's pods, on the same ports,
// for the tunnel through the API server (a rule of its own, which admits
// those pods and no one else). The guest agent's heartbeats go out and
// need no rule. Policies add up: no other tenant's pod is let in by this
// one.
func NetworkPolicy(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine, ex Exposure) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptrTo(intstr.FromInt32(22))}}
	if class.Spec.Access.ScreenSharing {
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: ptrTo(intstr.FromInt32(5900))})
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName(m), Namespace: m.Namespace, Labels: Labels(class, m),
			OwnerReferences: []metav1.OwnerReference{ownerRef(m)}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{macvirtv1alpha1.LabelMachine: m.Name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
		},
	}
	if ex.ClaimNamespace == "" {
		return np
	}
	peers := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{corev1.LabelMetadataName: ex.ClaimNamespace}}}}
	peers = append(peers, class.Spec.Access.AllowedPeers...)
	if ex.External {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}},
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "::/0"}})
	}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: ports}}
	if ex.Tunnel != nil {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{*ex.Tunnel.DeepCopy()}, Ports: ports})
	}
	return np
}

func ptrTo[T any](v T) *T { return &v }

// AdmitsNamespace says the policy lets pods of namespace in, as
// NetworkPolicy renders a bound machine's.
func AdmitsNamespace(np *networkingv1.NetworkPolicy, namespace string) bool {
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if sel := peer.NamespaceSelector; sel != nil && peer.PodSelector == nil && len(sel.MatchExpressions) == 0 &&
				len(sel.MatchLabels) == 1 && sel.MatchLabels[corev1.LabelMetadataName] == namespace {
				return true
			}
		}
	}
	return false
}

// TunnelPeer is the operator's pods as a NetworkPolicy peer: those with
// podLabels in the namespace namespace, and nothing else.
func TunnelPeer(namespace string, podLabels map[string]string) *networkingv1.NetworkPolicyPeer {
	return &networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: podLabels},
	}
}
