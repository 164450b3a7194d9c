package simulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The simulated network (Options.Network). A real cluster gives every pod an
// address on the pod network, and kube-proxy makes each node answer on every
// NodePort Service's node ports, forwarding to a ready endpoint of the
// Service's EndpointSlices. Here every node is this machine: a simulated
// node's address is NodeAddress (127.0.0.1), pod addresses exist only in
// this process's table (podNetwork), and the stand-in for kube-proxy
// (serviceProxy) listens on NodeAddress at each node port and forwards to
// the listener registered for the endpoint's address and port. So a client
// outside the cluster reaches a guest the way it would through a NodePort:
// by the node's address and the node port, and only while the Service's
// EndpointSlice names a ready endpoint.
//
// Connections to pod addresses are judged by the NetworkPolicies of both
// ends (netpol.go). ClusterIPs are not imitated (nothing outside a cluster
// reaches those either).

// NodeAddress is the InternalIP of the simulated nodes.
const NodeAddress = "127.0.0.1"

// podNetwork maps pod addresses and ports to local listeners.
type podNetwork struct {
	mu    sync.Mutex
	ports map[string]string // "ip:port" -> local "host:port"
}

// register makes podIP:port answer at the local address local, until the
// returned function is called.
func (n *podNetwork) register(podIP string, port int, local string) func() {
	key := net.JoinHostPort(podIP, strconv.Itoa(port))
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ports == nil {
		n.ports = map[string]string{}
	}
	n.ports[key] = local
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.ports[key] == local {
			delete(n.ports, key)
		}
	}
}

// dial connects to podIP:port on the pod network; refused, as by a pod
// that does not listen, when nothing is registered there.
func (n *podNetwork) dial(ctx context.Context, podIP string, port int) (net.Conn, error) {
	key := net.JoinHostPort(podIP, strconv.Itoa(port))
	n.mu.Lock()
	local, ok := n.ports[key]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s: connection refused", key)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", local)
}

// serviceProxy is the stand-in for kube-proxy: it keeps a listener on
// NodeAddress for every node port of every NodePort or LoadBalancer Service
// (pkg/proxy: node ports answer on every node address) and forwards each
// connection to a ready endpoint of the Service's EndpointSlices
// (kubernetes.io/service-name label; endpoints whose ready condition is
// false get no traffic).
type serviceProxy struct {
	sim *Simulator
	ctx context.Context

	mu        sync.Mutex
	listeners map[int32]*nodePortListener // by node port
}

type nodePortListener struct {
	service  types.NamespacedName
	portName string
	ln       net.Listener
}

func (p *serviceProxy) setup(mgr ctrl.Manager) error {
	if err := mgr.Add(p); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-service-proxy").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&corev1.Service{}).
		Complete(p)
}

// Start keeps the proxy's listeners for the manager's lifetime.
func (p *serviceProxy) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for port, l := range p.listeners {
		_ = l.ln.Close()
		delete(p.listeners, port)
	}
	return nil
}

// NeedLeaderElection: kube-proxy runs on every node.
func (p *serviceProxy) NeedLeaderElection() bool { return false }

// Reconcile opens the Service's node ports and closes those it no longer has.
func (p *serviceProxy) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	svc := &corev1.Service{}
	err := p.sim.client.Get(ctx, req.NamespacedName, svc)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	want := map[int32]string{}
	if err == nil && svc.DeletionTimestamp.IsZero() &&
		(svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
		for _, port := range svc.Spec.Ports {
			if port.NodePort != 0 && port.Protocol != corev1.ProtocolUDP && port.Protocol != corev1.ProtocolSCTP {
				want[port.NodePort] = port.Name
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listeners == nil {
		p.listeners = map[int32]*nodePortListener{}
	}
	for port, l := range p.listeners {
		if l.service == req.NamespacedName && want[port] != l.portName {
			_ = l.ln.Close()
			delete(p.listeners, port)
		}
	}
	var errs []error
	for port, name := range want {
		if l, ok := p.listeners[port]; ok {
			if l.service != req.NamespacedName {
				// The node port was another Service's, whose deletion is
				// not handled yet: look again once it is.
				errs = append(errs, fmt.Errorf("node port %d of Service %s is still held for Service %s", port, req.NamespacedName, l.service))
			}
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(NodeAddress, strconv.Itoa(int(port))))
		if err != nil {
			// kube-proxy logs a node port it cannot hold and goes on.
			errs = append(errs, fmt.Errorf("node port %d of Service %s: %w", port, req.NamespacedName, err))
			continue
		}
		l := &nodePortListener{service: req.NamespacedName, portName: name, ln: ln}
		p.listeners[port] = l
		go p.serve(l)
	}
	return reconcile.Result{}, errors.Join(errs...)
}

func (p *serviceProxy) serve(l *nodePortListener) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(conn, l)
	}
}

// forward splices conn to a ready endpoint of the listener's Service, or
// closes it when there is none (kube-proxy rejects such connections).
func (p *serviceProxy) forward(conn net.Conn, l *nodePortListener) {
	defer func() { _ = conn.Close() }()
	p.mu.Lock()
	ctx := p.ctx
	p.mu.Unlock()
	if ctx == nil {
		return
	}
	ip, port, ok := p.endpoint(ctx, l.service, l.portName)
	if !ok {
		return
	}
	// The client's address reaches the pod as the source: the node's own
	// after kube-proxy's masquerade, which here is the same 127.0.0.1.
	client, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
	up, err := p.sim.DialFrom(ctx, Peer{IP: client}, net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); closeWrite(conn); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// endpoint picks the first ready endpoint address of the Service's
// EndpointSlices and its port of the given name.
func (p *serviceProxy) endpoint(ctx context.Context, svc types.NamespacedName, portName string) (string, int, bool) {
	var slices discoveryv1.EndpointSliceList
	if err := p.sim.reader.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return "", 0, false
	}
	for _, s := range slices.Items {
		port := 0
		for _, sp := range s.Ports {
			if sp.Port != nil && (sp.Name == nil && portName == "" || sp.Name != nil && *sp.Name == portName) {
				port = int(*sp.Port)
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if len(ep.Addresses) > 0 {
				return ep.Addresses[0], port, true
			}
		}
	}
	return "", 0, false
}
