package claim

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// A bound claim's Mac has a stable DNS name, the same across re-binds of a
// claim of that name. A ClusterIP claim's is <label>.macs.<namespace>.svc:
// the namespace has one headless Service, macs (no selector, no cluster
// IP, so nothing is allocated per claim), and each claim one EndpointSlice
// of it whose endpoint carries the claim's DNS label as its hostname. A
// NodePort or LoadBalancer claim gets a Service of its own
// (<service>.<namespace>.svc) of that type, as the class allows, which a
// ClusterIP claim bound by an older operator also keeps. Either way the
// slice points at the machine's pod-network address, as KubeVirt reports
// it, on whatever node the machine runs (its virt-launcher pod lives in
// another namespace, so no selector could find it). What a claim makes is
// controlled by it and goes with it; a Service or EndpointSlice of its name
// that it does not control is never written: the claim says so.

// Service ports of a claim.
const (
	sshPortName = "ssh"
	vncPortName = "vnc"
	sshPort     = 22
	vncPort     = 5900
	// serviceManagedBy is the EndpointSlice controller a claim's slice is
	// managed by (Kubernetes' own leaves slices of other managers alone).
	serviceManagedBy = "macvirt.io"
)

// serviceName is the claim's Service name: the claim's own when it is a
// valid Service name (a DNS-1035 label) other than the namespace Service's,
// otherwise "mac-" and a hash of it.
func serviceName(c *macvirtv1alpha1.MacClaim) string {
	if len(validation.IsDNS1035Label(c.Name)) == 0 && c.Name != namespaceServiceName {
		return c.Name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(c.Name))
	return fmt.Sprintf("mac-%016x", h.Sum64())
}

// namespaceServiceName is the headless Service of every ClusterIP claim of
// a namespace.
const namespaceServiceName = "macs"

// dnsLabel is the claim's host name under the namespace Service: its own
// name when that is one DNS label (at most 63 characters, no dots);
// otherwise its first 46 characters, dots made dashes, a dash and 16 hex
// digits of a hash of the whole name, so names that differ stay apart.
func dnsLabel(c *macvirtv1alpha1.MacClaim) string {
	if len(validation.IsDNS1123Label(c.Name)) == 0 {
		return c.Name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(c.Name))
	head := strings.ReplaceAll(c.Name, ".", "-")
	if len(head) > 46 {
		head = head[:46]
	}
	return fmt.Sprintf("%s-%016x", strings.Trim(head, "-"), h.Sum64())
}

// nameHost is a ClusterIP claim's DNS name under the namespace Service.
func nameHost(c *macvirtv1alpha1.MacClaim) string {
	return dnsLabel(c) + "." + namespaceServiceName + "." + c.Namespace + ".svc"
}

// desiredNamespaceService is the namespace's headless Service. Its claim
// label, empty, keeps it in the operator's cache of the claims' Services.
func desiredNamespaceService(namespace string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: namespaceServiceName, Namespace: namespace,
			Labels: map[string]string{macvirtv1alpha1.LabelClaim: "", discoveryv1.LabelManagedBy: serviceManagedBy}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: sshPortName, Protocol: corev1.ProtocolTCP, Port: sshPort, TargetPort: intstr.FromInt32(sshPort)}}},
	}
}

// isNamespaceService says a Service is the headless one macvirt made.
func isNamespaceService(svc *corev1.Service) bool {
	return svc.Labels[discoveryv1.LabelManagedBy] == serviceManagedBy && svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0
}

// desiredNameSlice is the EndpointSlice that gives a ClusterIP claim its
// name under the namespace Service. Its name has a dot, which no claim
// Service's name (one DNS label) has, so it never meets one of theirs.
func desiredNameSlice(c *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) *discoveryv1.EndpointSlice {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: namespaceServiceName},
		Spec: corev1.ServiceSpec{Ports: desiredService(c, class).Spec.Ports}}
	slice := desiredSlice(c, svc, m)
	slice.Name = nameSliceName(c)
	for i := range slice.Endpoints {
		slice.Endpoints[i].Hostname = ptr.To(dnsLabel(c))
	}
	return slice
}

// nameSliceName is the name of the claim's EndpointSlice under the
// namespace Service.
func nameSliceName(c *macvirtv1alpha1.MacClaim) string {
	return dnsLabel(c) + "." + namespaceServiceName
}

// serviceHost is the DNS name of the claim's Service.
func serviceHost(c *macvirtv1alpha1.MacClaim) string {
	return serviceName(c) + "." + c.Namespace + ".svc"
}

// desiredService is the claim's Service as it should be.
func desiredService(c *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) *corev1.Service {
	access, _ := tenancy.Access(class, c.Spec.Access.Type)
	ports := []corev1.ServicePort{{Name: sshPortName, Protocol: corev1.ProtocolTCP, Port: sshPort, TargetPort: intstr.FromInt32(sshPort)}}
	if class != nil && class.Spec.Access.ScreenSharing {
		ports = append(ports, corev1.ServicePort{Name: vncPortName, Protocol: corev1.ProtocolTCP, Port: vncPort, TargetPort: intstr.FromInt32(vncPort)})
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName(c), Namespace: c.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelClaim: c.Name},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", c.Name, c.UID)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceType(access), Ports: ports},
	}
}

// desiredSlice is the EndpointSlice of the claim's Service: the machine's
// address, ready while it takes connections (takesConnections).
func desiredSlice(c *macvirtv1alpha1.MacClaim, svc *corev1.Service, m *macvirtv1alpha1.MacMachine) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: c.Namespace,
			Labels: map[string]string{macvirtv1alpha1.LabelClaim: c.Name, discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy: serviceManagedBy},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", c.Name, c.UID)}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.TargetPort.IntVal)})
	}
	addr, err := netip.ParseAddr(machineAddress(m))
	if err != nil {
		return slice
	}
	if addr.Is6() {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	ep := discoveryv1.Endpoint{Addresses: []string{addr.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(takesConnections(m))}}
	if m.Status.NodeName != "" {
		ep.NodeName = ptr.To(m.Status.NodeName)
	}
	slice.Endpoints = []discoveryv1.Endpoint{ep}
	return slice
}

// servicePorts is what of a Service's ports the claim decides.
func servicePorts(svc *corev1.Service) []corev1.ServicePort {
	out := make([]corev1.ServicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		out = append(out, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort})
	}
	return out
}

// mergePorts is want's ports, keeping the node ports the API server gave
// the ports of have while the Service keeps node ports (a ClusterIP
// Service may have none).
func mergePorts(have, want *corev1.Service) []corev1.ServicePort {
	out := append([]corev1.ServicePort(nil), want.Spec.Ports...)
	if want.Spec.Type == corev1.ServiceTypeClusterIP {
		return out
	}
	for i := range out {
		for _, h := range have.Spec.Ports {
			if h.Name == out[i].Name {
				out[i].NodePort = h.NodePort
			}
		}
	}
	return out
}

// nodeAddress is where a node's node ports are reached from outside the
// cluster: its ExternalIP, else its InternalIP, else its host name.
func nodeAddress(node *corev1.Node) string {
	for _, t := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP, corev1.NodeExternalDNS, corev1.NodeHostName} {
		for _, a := range node.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

// externalAccess is how the claim's Service reaches the Mac from outside
// the cluster (a NodePort at node, the address of the machine's node);
// nil for ClusterIP.
func externalAccess(svc *corev1.Service, node string) *macvirtv1alpha1.ExternalAccess {
	if svc == nil {
		return nil
	}
	ext := &macvirtv1alpha1.ExternalAccess{}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		ext.Address = node
		for _, p := range svc.Spec.Ports {
			switch p.Name {
			case sshPortName:
				ext.SSHPort = p.NodePort
			case vncPortName:
				ext.VNCPort = p.NodePort
			}
		}
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if ext.Address = in.IP; ext.Address == "" {
				ext.Address = in.Hostname
			}
			if ext.Address != "" {
				break
			}
		}
		for _, p := range svc.Spec.Ports {
			switch p.Name {
			case sshPortName:
				ext.SSHPort = p.Port
			case vncPortName:
				ext.VNCPort = p.Port
			}
		}
	default:
		return nil
	}
	return ext
}

// machineAddress is the address a tenant connects to: KubeVirt's, the
// virt-launcher pod's IP on the pod network. Never the guest's own report:
// behind KubeVirt's masquerade binding the guest sees only its side of the
// NAT (10.0.2.2 by default), which nobody outside the pod can reach.
func machineAddress(m *macvirtv1alpha1.MacMachine) string {
	if len(m.Status.Addresses) > 0 {
		return m.Status.Addresses[0]
	}
	return ""
}

// takesConnections says the machine's address routes to a running Mac: its
// VM runs, with a pod-network address. That is what an endpoint's
// readiness follows, not the machine's Ready, which also needs fresh
// guest-agent heartbeats: a fault on the agent's channel must not refuse
// SSH to a Mac whose VM and sshd run.
func takesConnections(m *macvirtv1alpha1.MacMachine) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionVMRunning) && machineAddress(m) != ""
}
