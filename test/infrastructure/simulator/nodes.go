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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kubelets of the simulated Apple-hardware nodes (Options.Nodes): they
// register their Node, keep its status the way the kubelet's node status
// setters do, and can be restarted, or their Node deleted and registered
// again, to show what survives.

// appleHardwareLabel marks, and taints, the nodes that may run macOS (the
// operator's api/v1alpha1.LabelAppleHardware; the simulator does not import
// the operator's API).
const appleHardwareLabel = "macvirt.io/apple-hardware"

// Simulated node capacity: room for any number of macOS VMs' CPU and memory.
var nodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// nodeNames are the registered nodes: Options.Nodes (or those SetNodes
// gave), or the one NodeName.
func (s *Simulator) nodeNames() []string {
	if nodes := s.appleNodes(); len(nodes) > 0 {
		return nodes
	}
	return []string{s.opts.NodeName}
}

// appleNodes are the nodes instances are scheduled onto; none when every
// instance goes to NodeName.
func (s *Simulator) appleNodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes
}

// SetNodes registers the named Apple-hardware nodes and from then on
// schedules instances onto registered Nodes, as Options.Nodes does; with
// no names, instances go to NodeName again (the Nodes stay). For a test
// suite whose specs run one after another.
func (s *Simulator) SetNodes(ctx context.Context, names ...string) error {
	s.mu.Lock()
	s.nodes = append([]string(nil), names...)
	s.mu.Unlock()
	for _, name := range names {
		if err := s.registerNode(ctx, name, false, time.Now()); err != nil {
			return fmt.Errorf("registering simulated node %s: %w", name, err)
		}
	}
	return nil
}

// registerNode creates the node if it is missing, as a starting kubelet
// does (tryRegisterWithAPIServer), and writes its status. A node that
// exists is reconciled as on a kubelet restart: when the kubelet's device
// manager has no checkpoint (a wiped or re-created node; see
// ShouldResetExtendedResourceCapacity), reconcileExtendedResource zeroes
// every extended resource in capacity and allocatable; otherwise they are
// kept. virt-handler's heartbeat is written as of beat.
func (s *Simulator) registerNode(ctx context.Context, name string, checkpointLost bool, beat time.Time) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(s.appleNodes()) > 0 {
		node.Labels = map[string]string{appleHardwareLabel: "true", corev1.LabelHostname: name}
		node.Spec.Taints = []corev1.Taint{{Key: appleHardwareLabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	if err := s.client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := s.writeHeartbeat(ctx, name, beat); err != nil {
		return err
	}
	if err := s.runHandlerPod(ctx, name); err != nil {
		return err
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// Uncached: the Node may have been created a moment ago.
		if err := s.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return err
		}
		if checkpointLost {
			for n := range node.Status.Capacity {
				if isExtended(n) {
					node.Status.Capacity[n] = quantity(0)
					node.Status.Allocatable[n] = quantity(0)
				}
			}
		}
		setKubeletStatus(node)
		setDevicePlugins(node)
		return s.client.Status().Update(ctx, node)
	})
	if err != nil {
		return err
	}
	return s.untaintReady(ctx, name)
}

// untaintReady plays kube-controller-manager's node lifecycle controller
// for a Ready node: the API server's TaintNodesByCondition admission gives
// every new Node the node.kubernetes.io/not-ready:NoSchedule taint, which
// the controller removes once the kubelet reports Ready
// (pkg/controller/nodelifecycle, doNoScheduleTaintingPass).
func (s *Simulator) untaintReady(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := s.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return err
		}
		kept := node.Spec.Taints[:0:0]
		for _, t := range node.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = kept
		return s.client.Update(ctx, node)
	})
}

// setKubeletStatus writes what the kubelet's node status setters own
// (pkg/kubelet/nodestatus/setters.go): addresses, Ready, and in MachineInfo
// its own capacity keys, leaving keys it does not own (an extended resource
// another party advertises) as they are, and allocatable equal to capacity
// for every key, with allocatable keys missing from capacity dropped.
func setKubeletStatus(node *corev1.Node) {
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: NodeAddress}, {Type: corev1.NodeHostName, Address: node.Name}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	for k, v := range nodeCapacity {
		node.Status.Capacity[k] = v.DeepCopy()
	}
	node.Status.Allocatable = corev1.ResourceList{}
	for k, v := range node.Status.Capacity {
		node.Status.Allocatable[k] = v.DeepCopy()
	}
}

// KubeVirt's device plugins advertise these on every node virt-handler runs
// on, 1000 of each (cmd/virt-handler/virt-handler.go); virt-controller asks
// for one of each in every launcher pod (pkg/virt-controller/services/
// renderresources.go).
var kubevirtDevices = []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"}

// setDevicePlugins writes what KubeVirt's device plugins make the kubelet
// advertise.
func setDevicePlugins(node *corev1.Node) {
	for _, d := range kubevirtDevices {
		node.Status.Capacity[d] = quantity(1000)
		node.Status.Allocatable[d] = quantity(1000)
	}
}

// handlerHeartbeat writes what the kubelet and virt-handler keep on a node
// when KubeVirt's own control plane runs: the node's labels (nodeLabels),
// and virt-handler's heartbeat (pkg/virt-handler/heartbeat), kept fresh
// (virt-controller's node controller fails the instances of a node whose
// heartbeat is more than 5 minutes old).
func (s *Simulator) handlerHeartbeat(ctx context.Context, name string) error {
	return s.writeHeartbeat(ctx, name, time.Now())
}

// staleHeartbeat is how old a lost node's heartbeat is made: past
// virt-controller's 5 minutes.
const staleHeartbeat = 6 * time.Minute

// writeHeartbeat writes the node's labels and a heartbeat of time at.
func (s *Simulator) writeHeartbeat(ctx context.Context, name string, at time.Time) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := s.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			// A node not registered (NodeName without Options.Network or
			// Nodes) has no virt-handler to beat for it.
			return client.IgnoreNotFound(err)
		}
		patch := client.MergeFrom(node.DeepCopy())
		for k, v := range nodeLabels() {
			metav1.SetMetaDataLabel(&node.ObjectMeta, k, v)
		}
		stamp, err := metav1.NewTime(at).MarshalJSON()
		if err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, kubevirtv1.VirtHandlerHeartbeat, strings.Trim(string(stamp), `"`))
		return s.client.Patch(ctx, node, patch)
	})
}

// hostCPU is the processor of every simulated node: a Mac Pro (2019)'s Xeon
// W (Cascade Lake). usableModels are the named CPU models libvirt reports
// usable on it, as virt-handler's node labeller lists them (none of
// KubeVirt's default obsolete models is among them).
const hostCPU = "Cascadelake-Server-noTSX"

var usableModels = []string{"Penryn", "Nehalem", "Westmere", "SandyBridge", "IvyBridge",
	"Haswell-noTSX", "Haswell-noTSX-IBRS", "Broadwell-noTSX", "Broadwell-noTSX-IBRS",
	"Skylake-Client-noTSX-IBRS", "Skylake-Server-noTSX-IBRS", hostCPU}

// nodeLabels are the labels the kubelet and virt-handler put on a node, which
// virt-controller's node selectors name: the architecture (kubelet), and
// from virt-handler (pkg/virt-handler/node-labeller) that VMs may run there,
// the usable CPU models, the host's own model and vendor, and the machine
// types QEMU offers.
func nodeLabels() map[string]string {
	labels := map[string]string{
		corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux",
		kubevirtv1.NodeSchedulable:                                "true",
		kubevirtv1.HostModelCPULabel + hostCPU:                    "true",
		kubevirtv1.CPUModelVendorLabel + "Intel":                  "true",
		kubevirtv1.SupportedMachineTypeLabel + "q35":              "true",
		kubevirtv1.SupportedMachineTypeLabel + "pc-q35-rhel9.6.0": "true",
	}
	for _, m := range usableModels {
		labels[kubevirtv1.CPUModelLabel+m] = "true"
	}
	return labels
}

// nodeBack ends a node's loss: its heartbeat is fresh again, or, where
// nodes are not registered (NodeName without Options.Network or Nodes), the
// Node and virt-handler pod registered for the loss go again, so that no
// later test sees them.
func (s *Simulator) nodeBack(ctx context.Context, node string) error {
	if s.opts.Network || len(s.appleNodes()) > 0 {
		return s.handlerHeartbeat(ctx, node)
	}
	handler := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kubevirtNamespace, Name: "virt-handler-" + node}}
	if err := s.client.Delete(ctx, handler, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		return err
	}
	return client.IgnoreNotFound(s.client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
}

// kubevirtNamespace is where KubeVirt's install runs virt-handler.
const kubevirtNamespace = "kubevirt"

// runHandlerPod gives the node the virt-handler pod KubeVirt's DaemonSet
// runs on every node, Running. virt-controller's node controller looks for
// it before it judges the node's instances (createEventIfNodeHasOrphanedVMIs
// in pkg/virt-controller/watch/node/node.go). A lost node's pod stays, as
// the API server keeps a pod its kubelet no longer reports.
func (s *Simulator) runHandlerPod(ctx context.Context, node string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubevirtNamespace, Name: "virt-handler-" + node,
			Labels: map[string]string{kubevirtv1.AppLabel: "virt-handler"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "virt-handler", Image: "quay.io/kubevirt/virt-handler:v1.9.0"}}},
	}
	if err := s.client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("running virt-handler on node %s: %w", node, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: NodeAddress, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "virt-handler", Image: pod.Spec.Containers[0].Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	return s.client.Status().Update(ctx, pod)
}

// heartbeatInterval is how often the simulated virt-handlers refresh their
// node's heartbeat, well inside virt-controller's 5 minutes.
const heartbeatInterval = time.Minute

// RestartKubelet restarts the named node's kubelet. With checkpointLost
// its device manager finds no checkpoint, as on a re-created or wiped
// node, and the kubelet zeroes every extended resource it advertises.
func (s *Simulator) RestartKubelet(ctx context.Context, node string, checkpointLost bool) error {
	if err := s.registerNode(ctx, node, checkpointLost, time.Now()); err != nil {
		return fmt.Errorf("restarting the kubelet of node %s: %w", node, err)
	}
	return nil
}

// ReregisterNode deletes the named Node and has its kubelet register it
// again, as after kubectl delete node and a kubelet restart: the new Node
// carries only what the kubelet writes.
func (s *Simulator) ReregisterNode(ctx context.Context, node string) error {
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.client.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", node, err)
	}
	for {
		err := s.reader.Get(ctx, types.NamespacedName{Name: node}, old)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return s.RestartKubelet(ctx, node, true)
}

// nodesRunnable registers the simulated nodes once the manager runs (with
// Options.Network or Nodes; otherwise pods are bound to NodeName, which no
// Node object stands for) and keeps their virt-handlers' heartbeats fresh.
type nodesRunnable struct{ sim *Simulator }

func (n nodesRunnable) Start(ctx context.Context) error {
	if n.sim.opts.Network || len(n.sim.opts.Nodes) > 0 {
		for _, name := range n.sim.nodeNames() {
			if err := n.sim.registerNode(ctx, name, false, time.Now()); err != nil {
				return fmt.Errorf("registering simulated node %s: %w", name, err)
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(heartbeatInterval):
		}
		for _, name := range n.sim.nodeNames() {
			if err := n.sim.handlerHeartbeat(ctx, name); err != nil && ctx.Err() == nil {
				ctrl.Log.WithName("sim-virt-handler").Error(err, "Heartbeat not written", "node", name)
			}
		}
	}
}

func (n nodesRunnable) NeedLeaderElection() bool { return false }

// placeWorkload runs the scheduler stand-in for w among the workloads
// placed lists. Without Options.Nodes everything goes to NodeName. Reads
// are uncached, standing in for kube-scheduler's assumed pods: two placed
// one after the other must not both take a node's last slot.
func (s *Simulator) placeWorkload(ctx context.Context, w workload, placed func() ([]workload, error)) (placement, error) {
	if len(s.appleNodes()) == 0 {
		return placement{Node: s.opts.NodeName}, nil
	}
	nodes := &corev1.NodeList{}
	if err := s.reader.List(ctx, nodes); err != nil {
		return placement{}, fmt.Errorf("listing nodes: %w", err)
	}
	others, err := placed()
	if err != nil {
		return placement{}, err
	}
	return schedule(w, nodes.Items, others), nil
}

// DrainResult is what one pass of kubectl drain over a node saw.
type DrainResult struct {
	// Refused holds the API server's answer to each refused eviction.
	Refused []string
	// Evicted names the instances whose virt-launcher pod was evicted.
	Evicted []string
	// Remaining counts the instances still on the node (kubectl drain
	// waits for them, and evicts again, until there are none).
	Remaining int
}

// Drain plays one pass of kubectl drain over node: it cordons the node
// (spec.unschedulable) and evicts, through policy/v1 Evictions, the
// virt-launcher pod of every instance on it. virt-api's eviction webhook
// answers for KubeVirt, by each instance's eviction strategy: under
// External it refuses with 429 and marks the instance for evacuation;
// simulated instances are not live-migratable, so LiveMigrate is refused
// without a mark, and LiveMigrateIfPossible, like no strategy, lets the
// eviction through (the pod goes and virt-launcher shuts the domain down).
// Call it again, as kubectl drain retries, until Remaining is 0.
func (s *Simulator) Drain(ctx context.Context, node string) (DrainResult, error) {
	var res DrainResult
	n := &corev1.Node{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
		return res, fmt.Errorf("reading node %s: %w", node, err)
	}
	if !n.Spec.Unschedulable {
		patch := client.MergeFrom(n.DeepCopy())
		n.Spec.Unschedulable = true
		if err := s.client.Patch(ctx, n, patch); err != nil {
			return res, fmt.Errorf("cordoning node %s: %w", node, err)
		}
	}
	return s.evictLaunchers(ctx, node)
}

// evictLaunchers evicts, as kubectl drain does (policy/v1 Eviction), every
// unfinished virt-launcher pod on node. virt-api's eviction webhook answers
// for KubeVirt: it refuses or marks the instance for evacuation according
// to its eviction strategy.
func (s *Simulator) evictLaunchers(ctx context.Context, node string) (DrainResult, error) {
	var res DrainResult
	pods := &corev1.PodList{}
	if err := s.reader.List(ctx, pods, launcherLabels); err != nil {
		return res, fmt.Errorf("listing virt-launcher pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != node || podDone(pod) {
			continue
		}
		res.Remaining++
		if pod.DeletionTimestamp != nil {
			continue
		}
		vmi := pod.Namespace + "/" + pod.Name
		if ref := metav1.GetControllerOf(pod); ref != nil {
			vmi = pod.Namespace + "/" + ref.Name
		}
		err := s.client.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}})
		switch {
		case err == nil:
			res.Evicted = append(res.Evicted, vmi)
		case apierrors.IsNotFound(err):
			res.Remaining--
		case apierrors.IsTooManyRequests(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			res.Refused = append(res.Refused, err.Error())
		default:
			return res, fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return res, nil
}

// Uncordon makes the node schedulable again (kubectl uncordon).
func (s *Simulator) Uncordon(ctx context.Context, node string) error {
	n := &corev1.Node{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Unschedulable = false
	return s.client.Patch(ctx, n, patch)
}
