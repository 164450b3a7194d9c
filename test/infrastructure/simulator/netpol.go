/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NetworkPolicy on the simulated pod network (Options.Network). A network
// plugin that enforces policy drops what the policies selecting either end
// do not allow; here every connection to a pod address is judged before it
// is made, by the NetworkPolicy evaluator of cyclonus (the matcher the
// Kubernetes SIGs' policy-assistant grew from), over the policies in the
// API server at that moment. A connection is judged once, when it opens,
// as a plugin judges a flow's first packet.

// Peer is the client end of a connection on the simulated network.
type Peer struct {
	// Namespace and Labels make the client a pod of that namespace with
	// those labels, such as a CI job's pod in a tenant's namespace. Empty:
	// the client is outside the pod network, at IP.
	Namespace string
	Labels    map[string]string
	// IP is the client's address: a pod's (optional; policies match pods
	// by their labels) or, without Namespace, an address outside the
	// cluster, matched by ipBlock peers only.
	IP string
	// HostNetwork makes the client the destination's node itself, or a pod
	// on its host network: most network plugins cannot tell those apart and
	// let the node's traffic to its own pods through whatever the policies
	// say (the kubelet's probes need it); Kubernetes leaves it undefined.
	// Such a connection is not judged (docs/access.md says what follows).
	HostNetwork bool
}

// podPeerIP is the address a pod client without one is given: one no
// simulated pod has (launcher pods get 10.244.x.2 and up).
const podPeerIP = "10.244.0.1"

// DialFrom connects from the client from to address (a pod's IP and port)
// on the simulated pod network. A connection the NetworkPolicies do not
// allow fails with an error that says so; one to an address nothing listens
// at is refused.
func (s *Simulator) DialFrom(ctx context.Context, from Peer, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("port of %s: %w", address, err)
	}
	if !from.HostNetwork {
		if err := s.admitted(ctx, from, host, port); err != nil {
			return nil, err
		}
	}
	return s.network.dial(ctx, host, port)
}

// admitted judges a TCP connection from the client to podIP:port by the
// NetworkPolicies of both ends' namespaces: nil when they allow it.
func (s *Simulator) admitted(ctx context.Context, from Peer, podIP string, port int) error {
	dst, err := s.podAt(ctx, podIP)
	if err != nil {
		return err
	}
	if dst == nil {
		// No running pod has the address any more (its pod ended, with
		// its network): whatever still listens there is out of reach.
		return fmt.Errorf("dial %s: connection timed out: no running pod has address %s",
			net.JoinHostPort(podIP, strconv.Itoa(port)), podIP)
	}
	dstPeer, err := s.internalPeer(ctx, dst.Namespace, dst.Labels, podIP)
	if err != nil {
		return err
	}
	srcPeer := &matcher.TrafficPeer{IP: from.IP}
	namespaces := []string{dst.Namespace}
	if from.Namespace != "" {
		if srcPeer.IP == "" {
			srcPeer.IP = podPeerIP
		}
		if srcPeer, err = s.internalPeer(ctx, from.Namespace, from.Labels, srcPeer.IP); err != nil {
			return err
		}
		if from.Namespace != dst.Namespace {
			namespaces = append(namespaces, from.Namespace)
		}
	}
	var policies []*networkingv1.NetworkPolicy
	for _, ns := range namespaces {
		list := &networkingv1.NetworkPolicyList{}
		if err := s.reader.List(ctx, list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing the NetworkPolicies of namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			policies = append(policies, &list.Items[i])
		}
	}
	result := matcher.BuildNetworkPolicies(false, policies).IsTrafficAllowed(&matcher.Traffic{
		Source: srcPeer, Destination: dstPeer,
		ResolvedPort: port, ResolvedPortName: portName(dst, port), Protocol: corev1.ProtocolTCP,
	})
	switch {
	case !result.Ingress.IsAllowed():
		return fmt.Errorf("dial %s: connection timed out: the NetworkPolicies selecting pod %s/%s do not let %s in on port %d",
			net.JoinHostPort(podIP, strconv.Itoa(port)), dst.Namespace, dst.Name, describePeer(from), port)
	case !result.Egress.IsAllowed():
		return fmt.Errorf("dial %s: connection timed out: the NetworkPolicies selecting %s do not let it out to pod %s/%s on port %d",
			net.JoinHostPort(podIP, strconv.Itoa(port)), describePeer(from), dst.Namespace, dst.Name, port)
	}
	return nil
}

// podAt returns the unfinished pod whose IP is ip, or nil.
func (s *Simulator) podAt(ctx context.Context, ip string) (*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := s.reader.List(ctx, pods); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.PodIP == ip && !podDone(p) {
			return p, nil
		}
	}
	return nil, nil
}

// internalPeer is a pod of namespace ns as the evaluator sees it, with the
// namespace's labels (kubernetes.io/metadata.name among them).
func (s *Simulator) internalPeer(ctx context.Context, ns string, labels map[string]string, ip string) (*matcher.TrafficPeer, error) {
	namespace := &corev1.Namespace{}
	if err := s.reader.Get(ctx, types.NamespacedName{Name: ns}, namespace); err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return &matcher.TrafficPeer{IP: ip, Internal: &matcher.InternalPeer{
		Namespace: ns, NamespaceLabels: namespace.Labels, PodLabels: labels,
	}}, nil
}

// portName is the name the pod gives port in its containers' ports, which
// policies may name instead of the number.
func portName(pod *corev1.Pod, port int) string {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if int(p.ContainerPort) == port && p.Protocol != corev1.ProtocolUDP && p.Protocol != corev1.ProtocolSCTP {
				return p.Name
			}
		}
	}
	return ""
}

func describePeer(p Peer) string {
	if p.Namespace != "" {
		return fmt.Sprintf("a pod of namespace %s labelled %v", p.Namespace, p.Labels)
	}
	return p.IP
}
