package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// Each bound claim gets a Service in its own namespace: a stable name for
// its Mac (<service>.<namespace>.svc, the same across re-binds of a claim of
// that name), of the type the claim asks for and its class allows. The
// Service has no selector (the Mac's virt-launcher pod lives in another
// namespace); the operator keeps its one EndpointSlice pointing at the
// machine's pod-network address, as KubeVirt reports it, on whatever node
// the machine runs. Both are controlled by the claim and go with it. A
// Service or EndpointSlice of that name the claim does not control is never
// written: the claim says so.

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
// valid Service name (a DNS-1035 label), otherwise "mac-" and a hash of it.
func serviceName(c *macvirtv1alpha1.MacClaim) string {
	if len(validation.IsDNS1035Label(c.Name)) == 0 {
		return c.Name
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(c.Name))
	return fmt.Sprintf("mac-%016x", h.Sum64())
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
			OwnerReferences: []metav1.OwnerReference{controllerRef("MacClaim", c.Name, c.UID)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceType(access), Ports: ports},
	}
}

// desiredSlice is the EndpointSlice of the claim's Service: the machine's
// address, ready while the machine is.
func desiredSlice(c *macvirtv1alpha1.MacClaim, svc *corev1.Service, m *macvirtv1alpha1.MacMachine) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: c.Namespace,
			Labels: map[string]string{macvirtv1alpha1.LabelClaim: c.Name, discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy: serviceManagedBy},
			OwnerReferences: []metav1.OwnerReference{controllerRef("MacClaim", c.Name, c.UID)}},
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
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(machineIsReady(m))}}
	if m.Status.NodeName != "" {
		ep.NodeName = ptr.To(m.Status.NodeName)
	}
	slice.Endpoints = []discoveryv1.Endpoint{ep}
	return slice
}

// ensureService answers: does the bound claim's Service route to its
// machine? A Service or EndpointSlice of the name that the claim does not
// control is left alone and recorded; a refused write shows in status.
func (r *MacClaimReconciler) ensureService(ctx context.Context, s *claimScope) (bool, error) {
	if s.machine == nil || s.lost != "" {
		return true, nil
	}
	class := s.class
	if class == nil {
		class = &macvirtv1alpha1.MacClass{}
		if err := r.Get(ctx, types.NamespacedName{Name: s.machine.Spec.ClassName}, class); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("getting MacClass %s: %w", s.machine.Spec.ClassName, err)
			}
			class = nil
		}
	}
	want := desiredService(s.claim, class)
	if _, refusal := tenancy.Access(class, s.claim.Spec.Access.Type); refusal != nil {
		s.serviceProblem = &problem{refusal.Reason, refusal.Message + "; the Service is ClusterIP meanwhile"}
	}
	svc, err := r.writeOwned(ctx, s, "Service", want, &corev1.Service{}, func(have, want client.Object) bool {
		h, w := have.(*corev1.Service), want.(*corev1.Service)
		if h.Spec.Type == w.Spec.Type && equality.Semantic.DeepEqual(servicePorts(h), servicePorts(w)) {
			return false
		}
		h.Spec.Type, h.Spec.Ports = w.Spec.Type, mergePorts(h, w)
		return true
	})
	if err != nil || svc == nil {
		return err == nil, err
	}
	s.service = svc.(*corev1.Service)
	nodeErr := r.readNodeAddress(ctx, s)
	wantSlice := desiredSlice(s.claim, s.service, s.machine)
	slice, err := r.writeOwned(ctx, s, "EndpointSlice", wantSlice, &discoveryv1.EndpointSlice{}, func(have, want client.Object) bool {
		h, w := have.(*discoveryv1.EndpointSlice), want.(*discoveryv1.EndpointSlice)
		if h.AddressType == w.AddressType && equality.Semantic.DeepEqual(h.Endpoints, w.Endpoints) && equality.Semantic.DeepEqual(h.Ports, w.Ports) {
			return false
		}
		// The address type is immutable: a machine that moved families
		// gets its slice recreated (a conflict below, then a create).
		if h.AddressType != w.AddressType {
			return false
		}
		h.Endpoints, h.Ports = w.Endpoints, w.Ports
		return true
	})
	if err != nil || slice == nil {
		return err == nil, err
	}
	s.endpointsReady = true
	return true, nodeErr
}

// readNodeAddress reads the address of the node a NodePort claim's machine
// runs on. A failed read leaves the Service and its EndpointSlice working,
// only the external address unknown: the claim says so, in the API
// server's words, and the error is returned for a retry with backoff.
func (r *MacClaimReconciler) readNodeAddress(ctx context.Context, s *claimScope) error {
	if s.service.Spec.Type != corev1.ServiceTypeNodePort || s.machine.Status.NodeName == "" {
		return nil
	}
	node := &corev1.Node{}
	err := r.Get(ctx, types.NamespacedName{Name: s.machine.Status.NodeName}, node)
	switch {
	case err == nil:
		s.nodeAddress = nodeAddress(node)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	err = fmt.Errorf("reading Node %s, whose address reaches the claim's NodePort: %w", s.machine.Status.NodeName, err)
	s.writeFailed = &problem{macvirtv1alpha1.ReasonNodeUnreadable, err.Error() + "; the external address is unknown until it can be read"}
	return err
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

// writeOwned makes the object named like want, of want's kind, what want
// says: created when missing, updated (with its resourceVersion) when
// changed says so, left alone and recorded when the claim does not control
// it. It returns the object as it is now, nil when it is not the claim's.
func (r *MacClaimReconciler) writeOwned(ctx context.Context, s *claimScope, kind string, want, have client.Object,
	changed func(have, want client.Object) bool) (client.Object, error) {
	key := client.ObjectKeyFromObject(want)
	err := r.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		// Not in the cache, which holds only the claims' own: create it,
		// and learn from the API server whether one of that name exists.
		err = r.Create(ctx, want)
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created the claim's "+kind, "name", key.Name)
			return want, nil
		case apierrors.IsAlreadyExists(err):
			if err := r.APIReader.Get(ctx, key, have); err != nil {
				return nil, fmt.Errorf("reading %s %s: %w", kind, key, err)
			}
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// The namespace is going, and the claim with it: nothing to
			// route to, and nothing to retry.
			return nil, nil
		default:
			err = fmt.Errorf("creating %s %s: %w", kind, key, err)
			s.writeFailed = &problem{macvirtv1alpha1.ReasonCreateFailed, err.Error()}
			recordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Expose", err.Error())
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("getting %s %s: %w", kind, key, err)
	}
	if !metav1.IsControlledBy(have, s.claim) {
		s.serviceProblem = &problem{macvirtv1alpha1.ReasonServiceConflict, fmt.Sprintf(
			"%s %s exists and is not controlled by this claim; it is left as it is, and the Mac is reachable only at its address: "+
				"rename or delete that %s to have the claim's written", kind, key, kind)}
		return nil, nil
	}
	if !changed(have, want) {
		return have, nil
	}
	if err := r.Update(ctx, have); err != nil {
		if apierrors.IsConflict(err) {
			return nil, err
		}
		err = fmt.Errorf("updating %s %s: %w", kind, key, err)
		s.writeFailed = &problem{macvirtv1alpha1.ReasonUpdateFailed, err.Error()}
		recordEvent(r.Recorder, s.claim, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Expose", err.Error())
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("updated the claim's "+kind, "name", key.Name)
	return have, nil
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
