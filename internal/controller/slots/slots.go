// Package slots counts macOS licence slots: what each Apple node
// advertises (its allocatable macvirt.io/macos-slots) and what the
// instances on it hold. The pool reports it when machines wait for a slot,
// the node controller decides what a node advertises from it, the machine
// reads the scheduler's words about it, and the metrics export it.
package slots

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/index"
)

// NodeUse is one Apple node's macOS slots as a pool reports them.
type NodeUse struct {
	Node      string
	Slots     int64
	Used      int64
	Cordoned  bool
	NotListed bool
}

// Requested is the macOS slots an instance's pod requests (its limit
// when it gives no request, as the API server's pod defaulting does); ok is
// false when it asks for none.
func Requested(v *kubevirtv1.VirtualMachineInstance) (n int64, ok bool) {
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	q, ok := v.Spec.Domain.Resources.Requests[name]
	if !ok {
		q, ok = v.Spec.Domain.Resources.Limits[name]
	}
	return q.Value(), ok
}

// Use counts, per Apple node, its advertised slots and the instances
// on it that hold one (not finished: the scheduler no longer counts a
// Succeeded or Failed pod).
func Use(nodes []corev1.Node, vmis []kubevirtv1.VirtualMachineInstance) []NodeUse {
	used := map[string]int64{}
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	for i := range vmis {
		v := &vmis[i]
		if v.Status.NodeName == "" || v.IsFinal() {
			continue
		}
		if n, ok := Requested(v); ok {
			used[v.Status.NodeName] += n
		}
	}
	var out []NodeUse
	for i := range nodes {
		n := &nodes[i]
		q, listed := n.Status.Allocatable[name]
		out = append(out, NodeUse{Node: n.Name, Slots: q.Value(), Used: used[n.Name], Cordoned: n.Spec.Unschedulable, NotListed: !listed})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// ReadUse reads every Apple node's slots and the instances on each,
// through the index of instances by node: only those nodes' instances are
// read, not the cluster's.
func ReadUse(ctx context.Context, r client.Reader) ([]NodeUse, error) {
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{macvirtv1alpha1.LabelAppleHardware: "true"}); err != nil {
		return nil, fmt.Errorf("listing Apple nodes: %w", err)
	}
	var vmis []kubevirtv1.VirtualMachineInstance
	for i := range nodes.Items {
		var list kubevirtv1.VirtualMachineInstanceList
		if err := r.List(ctx, &list, client.MatchingFields{index.InstanceNode: nodes.Items[i].Name}); err != nil {
			return nil, fmt.Errorf("listing the VirtualMachineInstances on node %s: %w", nodes.Items[i].Name, err)
		}
		vmis = append(vmis, list.Items...)
	}
	return Use(nodes.Items, vmis), nil
}

// Exhausted reports a scheduler message that names the macOS slots.
func Exhausted(schedulerMessage string) bool {
	return strings.Contains(schedulerMessage, "Insufficient "+macvirtv1alpha1.ResourceMacOSSlots)
}
