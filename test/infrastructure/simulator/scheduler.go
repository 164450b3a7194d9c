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
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The scheduler stand-in: with Options.Nodes set, an instance's
// virt-launcher pod is placed on a registered Node the way kube-scheduler's
// default plugins would, one filter after another per node, the first
// failing filter giving the node's reason (pkg/scheduler/framework/
// plugins: nodeunschedulable, tainttoleration, nodeaffinity,
// noderesources/fit.go fitsRequest), then the node with the most of the
// first requested extended resource left is chosen. That scoring is the
// simulator's simplification: kube-scheduler scores CPU and memory
// (LeastAllocated) and picks among equals at random; here ties go to the
// first name. Required node affinity, and the node labels KubeVirt's own
// node selectors name (kubevirt.io/schedulable, CPU models), are not
// modelled: a simulated node matches them all.
//
// Only what a macOS VM's pod asks for beyond CPU and memory is counted:
// the extended resources of the instance's spec.domain.resources, which
// virt-controller copies onto the compute container (pkg/virt-controller/
// services/renderresources.go, copyResources). The simulated nodes have
// room for any CPU and memory.

// Filter reasons in kube-scheduler's words.
const (
	// nodeunschedulable.ErrReasonUnschedulable.
	reasonNodeCordoned = "node(s) were unschedulable"
	// tainttoleration's Filter.
	reasonUntoleratedTaint = "node(s) had untolerated taint(s)"
	// nodeaffinity.ErrReasonPod.
	reasonNodeSelector = "node(s) didn't match Pod's node affinity/selector"
	// volumebinding.ErrReasonNodeConflict.
	reasonVolumeNodeConflict = "node(s) had volume node affinity conflict"
	// noderesources: "Insufficient " + resource name.
	reasonInsufficient = "Insufficient "
	// The preemption plugin's per-node answers (pkg/scheduler/framework/
	// preemption/preemption.go): a node whose only problem is a resource
	// held by pods of the same priority has no victims; any other reason
	// cannot be cured by preemption.
	preemptionNoVictims   = "No preemption victims found for incoming pod"
	preemptionNotHelpful  = "Preemption is not helpful for scheduling"
	unschedulableTaintKey = "node.kubernetes.io/unschedulable"
)

// placement is where the scheduler put a pod, or why it could not.
type placement struct {
	Node    string
	Message string
}

// workload is what kube-scheduler sees of a virt-launcher pod: where it
// must go, what it tolerates, the extended resources it asks for, and where
// it is. The simulator schedules pods (podWorkload) when KubeVirt's own
// control plane runs, and otherwise the instances that stand for them
// (instanceWorkload).
type workload struct {
	UID          types.UID
	Node         string
	Done         bool
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Requests     corev1.ResourceList
	// VolumeNode is the node its volumes were given
	// (volume.kubernetes.io/selected-node): it fits no other.
	VolumeNode string
}

// instanceWorkload is the pod an instance's spec stands for.
func instanceWorkload(vmi *kubevirtv1.VirtualMachineInstance) workload {
	res := vmi.Spec.Domain.Resources
	return workload{UID: vmi.UID, Node: vmi.Status.NodeName, Done: vmi.IsFinal(),
		NodeSelector: vmi.Spec.NodeSelector, Tolerations: vmi.Spec.Tolerations,
		Requests: extendedRequests(res.Requests, res.Limits, nil)}
}

// podWorkload is a pod as kube-scheduler reads it: the sum of its
// containers' requests (init containers run before, one at a time, and ask
// for no more here).
func podWorkload(pod *corev1.Pod) workload {
	sum := corev1.ResourceList{}
	for _, c := range pod.Spec.Containers {
		sum = extendedRequests(c.Resources.Requests, c.Resources.Limits, sum)
	}
	done := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	return workload{UID: pod.UID, Node: pod.Spec.NodeName, Done: done,
		NodeSelector: pod.Spec.NodeSelector, Tolerations: pod.Spec.Tolerations, Requests: sum}
}

// extendedRequests adds the extended resources of requests to sum (limits
// stand in for missing requests, as the API server's pod defaulting does).
func extendedRequests(requests, limits, sum corev1.ResourceList) corev1.ResourceList {
	if sum == nil {
		sum = corev1.ResourceList{}
	}
	for name, q := range limits {
		if _, ok := requests[name]; !ok && isExtended(name) {
			add(sum, name, q)
		}
	}
	for name, q := range requests {
		if isExtended(name) {
			add(sum, name, q)
		}
	}
	return sum
}

func add(sum corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
	total := sum[name]
	total.Add(q)
	sum[name] = total
}

// isExtended reports a resource name with a domain outside kubernetes.io,
// as v1helper.IsExtendedResourceName does for the names used here.
func isExtended(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.Contains(s, "kubernetes.io/") && !strings.HasPrefix(s, "requests.")
}

// schedule places w on one of nodes. placed are the workloads already
// assigned to a node; finished ones are not counted (kube-scheduler does not
// see Succeeded or Failed pods).
func schedule(w workload, nodes []corev1.Node, placed []workload) placement {
	used := map[string]corev1.ResourceList{}
	for _, p := range placed {
		if p.UID == w.UID || p.Node == "" || p.Done {
			continue
		}
		used[p.Node] = extendedRequests(p.Requests, nil, used[p.Node])
	}
	reasons, preemption := map[string]int{}, map[string]int{}
	best, bestFree := "", int64(-1)
	sorted := append([]corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range sorted {
		node := &sorted[i]
		reason, free := filterNode(w, node, used[node.Name])
		if reason != "" {
			reasons[reason]++
			if strings.HasPrefix(reason, reasonInsufficient) {
				preemption[preemptionNoVictims]++
			} else {
				preemption[preemptionNotHelpful]++
			}
			continue
		}
		if free > bestFree {
			best, bestFree = node.Name, free
		}
	}
	if best != "" {
		return placement{Node: best}
	}
	if len(nodes) == 0 {
		// ErrNoNodesAvailable (pkg/scheduler/schedule_one.go).
		return placement{Message: "no nodes available to schedule pods"}
	}
	return placement{Message: fitError(len(nodes), reasons) + " preemption: " + fitError(len(nodes), preemption)}
}

// filterNode runs the filters on one node and returns the first failing
// reason, or the free amount of the first requested extended resource.
func filterNode(w workload, node *corev1.Node, used corev1.ResourceList) (string, int64) {
	want, tolerations := w.Requests, w.Tolerations
	if node.Spec.Unschedulable && !tolerates(tolerations, corev1.Taint{Key: unschedulableTaintKey, Effect: corev1.TaintEffectNoSchedule}) {
		return reasonNodeCordoned, 0
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule || tolerates(tolerations, t) {
			continue
		}
		// tainttoleration's Filter (taint_toleration.go, Kubernetes 1.36).
		return reasonUntoleratedTaint, 0
	}
	for k, v := range w.NodeSelector {
		if node.Labels[k] != v {
			return reasonNodeSelector, 0
		}
	}
	if w.VolumeNode != "" && node.Name != w.VolumeNode {
		return reasonVolumeNodeConflict, 0
	}
	free := int64(0)
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for i, n := range names {
		name := corev1.ResourceName(n)
		alloc := node.Status.Allocatable[name]
		u := used[name]
		left := alloc.DeepCopy()
		left.Sub(u)
		q := want[name]
		if left.Cmp(q) < 0 {
			return reasonInsufficient + n, 0
		}
		if i == 0 {
			left.Sub(q)
			free = left.Value()
		}
	}
	return "", free
}

// tolerates reports whether a toleration matches the taint (key, effect,
// and for Equal the value), as Toleration.ToleratesTaint does.
func tolerates(tolerations []corev1.Toleration, t corev1.Taint) bool {
	for _, tol := range tolerations {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		if tol.Key != "" && tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case corev1.TolerationOpExists:
			return true
		case corev1.TolerationOpEqual, "":
			if tol.Key != "" && tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// fitError formats counted reasons as FitError.Error does
// (pkg/scheduler/framework/types.go): "0/N nodes are available: " and the
// reasons, each with its count, sorted and joined by ", ", then ".".
func fitError(nodes int, reasons map[string]int) string {
	parts := make([]string, 0, len(reasons))
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return fmt.Sprintf("0/%d nodes are available: %s.", nodes, strings.Join(parts, ", "))
}

// quantity is a whole-number quantity.
func quantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
