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

package pool

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/slots"
)

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

// slotsProblem is a pool's Ready=False problem when waiting machines find
// no slot: how many wait, and each node's free slots, or why they could
// not be read.
func slotsProblem(waiting int, use []slots.NodeUse, readErr error) *base.Problem {
	if waiting == 0 {
		return nil
	}
	if readErr != nil {
		return &base.Problem{Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted, Message: fmt.Sprintf(
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
	return &base.Problem{Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted, Message: fmt.Sprintf(
		"%d machine(s) cannot be scheduled: no Apple node they may run on has a free macOS slot (%s; %s). "+
			"They wait rather than being replaced; add an Apple node, free a slot, or lower spec.idle (the licence allows %d macOS VMs per Mac: docs/licensing.md)",
		waiting, macvirtv1alpha1.ResourceMacOSSlots, nodes, macvirtv1alpha1.DefaultMacOSSlots)}
}
