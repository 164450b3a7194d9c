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

package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// nodeSlotUse is one Apple node's macOS slots as a pool reports them.
type nodeSlotUse struct {
	Node      string
	Slots     int64
	Used      int64
	Cordoned  bool
	NotListed bool
}

// waitingForSlots counts the pool's unbound machines whose VM cannot be
// scheduled for want of a macOS slot.
func waitingForSlots(machines []macvirtv1alpha1.MacMachine) int {
	n := 0
	for i := range machines {
		m := &machines[i]
		if m.Spec.ClaimRef != nil || !m.DeletionTimestamp.IsZero() {
			continue
		}
		if c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); c != nil &&
			c.Reason == macvirtv1alpha1.ReasonMacOSSlotsExhausted {
			n++
		}
	}
	return n
}

// slotsRequested is the macOS slots an instance's pod requests (its limit
// when it gives no request, as the API server's pod defaulting does); ok is
// false when it asks for none.
func slotsRequested(v *kubevirtv1.VirtualMachineInstance) (n int64, ok bool) {
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	q, ok := v.Spec.Domain.Resources.Requests[name]
	if !ok {
		q, ok = v.Spec.Domain.Resources.Limits[name]
	}
	return q.Value(), ok
}

// slotUse counts, per Apple node, its advertised slots and the instances
// on it that hold one (not finished: the scheduler no longer counts a
// Succeeded or Failed pod).
func slotUse(nodes []corev1.Node, vmis []kubevirtv1.VirtualMachineInstance) []nodeSlotUse {
	used := map[string]int64{}
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	for i := range vmis {
		v := &vmis[i]
		if v.Status.NodeName == "" || v.IsFinal() {
			continue
		}
		if n, ok := slotsRequested(v); ok {
			used[v.Status.NodeName] += n
		}
	}
	var out []nodeSlotUse
	for i := range nodes {
		n := &nodes[i]
		q, listed := n.Status.Allocatable[name]
		out = append(out, nodeSlotUse{Node: n.Name, Slots: q.Value(), Used: used[n.Name], Cordoned: n.Spec.Unschedulable, NotListed: !listed})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// slotsProblem is a pool's Ready=False problem when waiting machines find
// no slot: how many wait, and each node's free slots, or why they could
// not be read.
func slotsProblem(waiting int, use []nodeSlotUse, readErr error) *problem {
	if waiting == 0 {
		return nil
	}
	if readErr != nil {
		return &problem{macvirtv1alpha1.ReasonMacOSSlotsExhausted, fmt.Sprintf(
			"%d machine(s) cannot be scheduled: no Apple node they may run on has a free macOS slot (%s); the free slots per node could not be read: %v",
			waiting, macvirtv1alpha1.ResourceMacOSSlots, readErr)}
	}
	parts := make([]string, 0, len(use))
	for _, u := range use {
		part := fmt.Sprintf("%s %d of %d free", u.Node, max(0, u.Slots-u.Used), u.Slots)
		switch {
		case u.NotListed:
			part = fmt.Sprintf("%s advertises no %s yet", u.Node, macvirtv1alpha1.ResourceMacOSSlots)
		case u.Cordoned:
			part += " (cordoned)"
		}
		parts = append(parts, part)
	}
	nodes := "no node is labelled " + macvirtv1alpha1.LabelAppleHardware + "=true"
	if len(parts) > 0 {
		nodes = "free slots per node: " + strings.Join(parts, ", ")
	}
	return &problem{macvirtv1alpha1.ReasonMacOSSlotsExhausted, fmt.Sprintf(
		"%d machine(s) cannot be scheduled: no Apple node they may run on has a free macOS slot (%s; %s). "+
			"They wait rather than being replaced; add an Apple node, free a slot, or lower spec.idle (the licence allows %d macOS VMs per Mac: docs/licensing.md)",
		waiting, macvirtv1alpha1.ResourceMacOSSlots, nodes, macvirtv1alpha1.DefaultMacOSSlots)}
}

// observeSlots answers: do machines of the pool wait for a macOS slot, and
// how full is each Apple node? Nodes and instances are read only then.
func (r *MacPoolReconciler) observeSlots(ctx context.Context, s *poolScope) (bool, error) {
	waiting := waitingForSlots(s.Machines)
	if waiting == 0 {
		return true, nil
	}
	// The report is information: a failed read says so in it, and the
	// pool goes on with its creates and deletes.
	use, err := readSlotUse(ctx, r.Client)
	s.Slots = slotsProblem(waiting, use, err)
	return true, nil
}

// readSlotUse reads every Apple node's slots and the instances on each,
// through the index of instances by node: only those nodes' instances are
// read, not the cluster's.
func readSlotUse(ctx context.Context, r client.Reader) ([]nodeSlotUse, error) {
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels{macvirtv1alpha1.LabelAppleHardware: "true"}); err != nil {
		return nil, fmt.Errorf("listing Apple nodes: %w", err)
	}
	var vmis []kubevirtv1.VirtualMachineInstance
	for i := range nodes.Items {
		var list kubevirtv1.VirtualMachineInstanceList
		if err := r.List(ctx, &list, client.MatchingFields{vmiNodeField: nodes.Items[i].Name}); err != nil {
			return nil, fmt.Errorf("listing the VirtualMachineInstances on node %s: %w", nodes.Items[i].Name, err)
		}
		vmis = append(vmis, list.Items...)
	}
	return slotUse(nodes.Items, vmis), nil
}

// slotsExhausted reports a scheduler message that names the macOS slots.
func slotsExhausted(schedulerMessage string) bool {
	return strings.Contains(schedulerMessage, "Insufficient "+macvirtv1alpha1.ResourceMacOSSlots)
}
