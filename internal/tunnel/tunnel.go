// Package tunnel is the operator's aggregated API: the way into a claimed
// Mac through the Kubernetes API server, authorised by the tenant's own
// rights on the claim, for a laptop that reaches neither the pod network
// nor any node port.
//
// A CustomResourceDefinition cannot have subresources of its own beyond
// status and scale, so the tunnel is an API group of its own that the API
// server proxies to the operator (an APIService), as KubeVirt serves
// subresources.kubevirt.io beside its CRDs:
//
//	GET /apis/subresources.macvirt.io/v1alpha1/namespaces/NS/macclaims/NAME/portforward/PORT
//
// upgraded to a WebSocket whose binary messages carry one TCP connection to
// PORT of the claim's Mac. The API server authenticates the tenant and
// authorises get on macclaims/portforward in group subresources.macvirt.io
// before it proxies; the operator accepts the request only from the API
// server (its front-proxy client certificate, from
// kube-system/extension-apiserver-authentication), asks the API server
// again whether the user named in the request headers may (a
// SubjectAccessReview), and connects only to the SSH port, or Screen
// Sharing's when the class offers it, of the machine bound to that claim.
// The machines' NetworkPolicy admits the operator's pods on those ports.
package tunnel

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// The tunnel's API.
const (
	// Group is the tunnel's API group; Version its only version.
	Group   = "subresources.macvirt.io"
	Version = "v1alpha1"
	// Resource and Subresource are what RBAC grants: get on
	// macclaims/portforward in Group.
	Resource    = "macclaims"
	Subresource = "portforward"
	// Protocol is the WebSocket subprotocol: binary messages carry the
	// connection's bytes both ways, nothing else.
	Protocol = "v1.portforward.macvirt.io"
	// APIServiceName is the APIService that registers Group.
	APIServiceName = Version + "." + Group
	// ServiceName is the Service in the operator's namespace the
	// APIService names (config/tunnel).
	ServiceName = "macvirt-tunnel"
)

// Path is the API path of a tunnel to port of claim namespace/name.
func Path(namespace, name string, port int32) string {
	return fmt.Sprintf("/apis/%s/%s/namespaces/%s/%s/%s/%s/%d", Group, Version,
		url.PathEscape(namespace), Resource, url.PathEscape(name), Subresource, port)
}

// request is a tunnel request's path, parsed.
type request struct {
	namespace, name string
	port            int32
}

// parsePath reads a tunnel path; ok is false for any other path.
func parsePath(path string) (request, bool) {
	rest, found := strings.CutPrefix(path, "/apis/"+Group+"/"+Version+"/namespaces/")
	if !found {
		return request{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != Resource || parts[3] != Subresource || parts[0] == "" || parts[2] == "" {
		return request{}, false
	}
	port, err := strconv.ParseInt(parts[4], 10, 32)
	if err != nil || port < 1 || port > 65535 {
		return request{}, false
	}
	return request{namespace: parts[0], name: parts[2], port: int32(port)}, true
}

// Ports are the ports of a claim's Mac the tunnel reaches: its SSH port,
// and Screen Sharing's when the class offers it (the claim's status says
// both), as the machine's NetworkPolicy opens them.
func Ports(c *macvirtv1alpha1.MacClaim) []int32 {
	conn := c.Status.Connection
	if conn == nil {
		return nil
	}
	ssh := conn.SSHPort
	if ssh == 0 {
		ssh = 22
	}
	ports := []int32{ssh}
	if conn.VNCPort != 0 {
		ports = append(ports, conn.VNCPort)
	}
	return ports
}

// Route is where a tunnel goes: an address on the pod network (a KubeVirt
// Mac), or, for a Mac of an Apple-silicon host, the machine whose VM that
// host's agent connects to.
type Route struct {
	// Address is host:port on the pod network; empty for a host's VM.
	Address string
	// Host is the MacHost whose agent carries the tunnel; Machine and UID
	// are the machine it connects to, at Port.
	Host    string
	Machine types.NamespacedName
	UID     types.UID
	Port    int32
}

func (r Route) String() string {
	if r.Host == "" {
		return r.Address
	}
	return fmt.Sprintf("port %d of macmachine %s on MacHost %s", r.Port, r.Machine, r.Host)
}

// Target decides where a tunnel to port of claim c goes: the address of
// the machine bound to it, which the operator alone writes, or the host
// agent of the Mac the machine is placed on. m is the machine c's status
// names (nil when it does not exist). The error says why there is no way
// in, for the tenant to read.
func Target(c *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine, port int32) (Route, error) {
	name := c.Namespace + "/" + c.Name
	hosted := m != nil && m.Spec.HostName != ""
	switch {
	case c.Status.Phase.Ended():
		return Route{}, fmt.Errorf("macclaim %s is %s: it has no Mac any more", name, c.Status.Phase)
	case c.Status.MachineRef == nil || m == nil:
		return Route{}, fmt.Errorf("macclaim %s has no Mac yet (phase %q); kubectl mac wait %s", name, c.Status.Phase, c.Name)
	case m.Spec.ClaimRef == nil || m.Spec.ClaimRef.UID != c.UID:
		return Route{}, fmt.Errorf("macclaim %s is not bound to macmachine %s/%s", name, m.Namespace, m.Name)
	case hosted && (m.Status.Host == nil || m.Status.Host.State != macvirtv1alpha1.HostVMRunning):
		return Route{}, fmt.Errorf("macclaim %s's Mac does not run on MacHost %s yet (machine phase %q); kubectl mac wait %s",
			name, m.Spec.HostName, m.Status.Phase, c.Name)
	case !hosted && (len(m.Status.Addresses) == 0 || m.Status.Addresses[0] == ""):
		return Route{}, fmt.Errorf("macclaim %s's Mac has no address yet (machine phase %q); kubectl mac wait %s", name, m.Status.Phase, c.Name)
	}
	ports := Ports(c)
	for _, p := range ports {
		if p != port {
			continue
		}
		if hosted {
			return Route{Host: m.Spec.HostName, Machine: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, UID: m.UID, Port: port}, nil
		}
		return Route{Address: net.JoinHostPort(m.Status.Addresses[0], strconv.Itoa(int(port)))}, nil
	}
	if len(ports) == 0 {
		return Route{}, fmt.Errorf("macclaim %s is not Ready yet: its status has no connection; kubectl mac wait %s", name, c.Name)
	}
	return Route{}, fmt.Errorf("port %d of macclaim %s is not open: the tunnel reaches port %s (SSH%s)", port, name,
		joinPorts(ports), map[bool]string{true: " and Screen Sharing", false: ""}[len(ports) > 1])
}

func joinPorts(ports []int32) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, " and ")
}
