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
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestComputeNodeSlots(t *testing.T) {
	apple := map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}
	with := func(labels, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mac-1", Labels: labels, Annotations: annotations}}
	}
	merge := func(a, b map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range a {
			out[k] = v
		}
		for k, v := range b {
			out[k] = v
		}
		return out
	}
	key := macvirtv1alpha1.AnnotationMacOSSlots
	for name, tc := range map[string]struct {
		node    *corev1.Node
		want    int64 // -1: none
		invalid string
	}{
		"not Apple hardware: none":                     {node: with(nil, nil), want: -1},
		"only the exact label value the class selects": {node: with(map[string]string{macvirtv1alpha1.LabelAppleHardware: "True"}, nil), want: -1},
		"Apple hardware: the licence's two":            {node: with(apple, nil), want: 2},
		"a label sets it":                              {node: with(merge(apple, map[string]string{key: "1"}), nil), want: 1},
		"the annotation wins over the label":           {node: with(merge(apple, map[string]string{key: "1"}), map[string]string{key: "3"}), want: 3},
		"zero takes a Mac out of macOS service":        {node: with(apple, map[string]string{key: "0"}), want: 0},
		"not a number: the default, and why": {node: with(apple, map[string]string{key: "two"}), want: 2,
			invalid: `annotation macvirt.io/macos-slots="two" on node mac-1 is not a whole number from 0 to 64`},
		"out of range: the default, and why": {node: with(merge(apple, map[string]string{key: "-1"}), nil), want: 2,
			invalid: `label macvirt.io/macos-slots="-1" on node mac-1 is not a whole number from 0 to 64`},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := computeNodeSlots(tc.node, heldSlots{})
			if tc.want < 0 {
				g.Expect(got.Want).To(BeNil())
			} else {
				g.Expect(got.Want).NotTo(BeNil())
				g.Expect(got.Want.Value()).To(Equal(tc.want))
			}
			if tc.invalid == "" {
				g.Expect(got.Invalid).To(BeEmpty())
			} else {
				g.Expect(got.Invalid).To(ContainSubstring(tc.invalid))
				g.Expect(got.Invalid).To(ContainSubstring("kubectl annotate node mac-1"))
			}
		})
	}
}

func TestComputeNodeSlotsKeepsRunningVMsAdmittable(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mac-1", Labels: map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"},
		Annotations: map[string]string{macvirtv1alpha1.AnnotationMacOSSlots: "1"}}}
	for name, tc := range map[string]struct {
		held     heldSlots
		want     int64
		adjusted string
	}{
		"fewer VMs than slots":  {held: heldSlots{Requested: 1}, want: 1},
		"lowered under two VMs": {held: heldSlots{Requested: 2}, want: 2, adjusted: "runs 2 macOS VMs that hold a slot, more than the 1 it should advertise: advertising 2"},
		"an old VM holds a licence without asking": {held: heldSlots{Unrequested: 1}, want: 0,
			adjusted: "runs 1 macOS VMs started before VMs requested a slot: advertising 0 of its 1 slots"},
		"never below what running VMs requested, and the excess said": {held: heldSlots{Requested: 1, Unrequested: 1}, want: 1,
			adjusted: "runs 2 macOS VMs, 1 of them started before VMs requested a slot, more than its 1 slots: advertising 1"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := computeNodeSlots(node, tc.held)
			g.Expect(got.Want.Value()).To(Equal(tc.want))
			if tc.adjusted == "" {
				g.Expect(got.Adjusted).To(BeEmpty())
			} else {
				g.Expect(got.Adjusted).To(ContainSubstring(tc.adjusted))
			}
		})
	}
	g := NewWithT(t)
	unlabelled := node.DeepCopy()
	unlabelled.Labels = nil
	got := computeNodeSlots(unlabelled, heldSlots{Requested: 2})
	g.Expect(got.Want.Value()).To(Equal(int64(2)), "a node that lost its label keeps its running Macs admittable")
	g.Expect(got.Adjusted).To(ContainSubstring("is not labelled macvirt.io/apple-hardware=true but runs 2 macOS VMs"))
	g.Expect(computeNodeSlots(unlabelled, heldSlots{}).Want).To(BeNil())
	one := resource.MustParse("1")
	requesting := kubevirtv1.VirtualMachineInstance{}
	requesting.Spec.Domain.Resources.Requests = corev1.ResourceList{macvirtv1alpha1.ResourceMacOSSlots: one}
	old := kubevirtv1.VirtualMachineInstance{}
	old.Labels = map[string]string{macvirtv1alpha1.LabelMachine: "m"}
	done := *requesting.DeepCopy()
	done.Status.Phase = kubevirtv1.Succeeded
	g.Expect(countHeld([]kubevirtv1.VirtualMachineInstance{requesting, old, done, {}})).To(Equal(heldSlots{Requested: 1, Unrequested: 1}))
}

func TestAdvertised(t *testing.T) {
	g := NewWithT(t)
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	two := resource.MustParse("2")
	node := &corev1.Node{}
	g.Expect(advertised(node, nil)).To(BeTrue(), "none wanted, none there")
	g.Expect(advertised(node, &two)).To(BeFalse())
	node.Status.Capacity = corev1.ResourceList{name: two}
	g.Expect(advertised(node, &two)).To(BeFalse(), "allocatable too")
	node.Status.Allocatable = corev1.ResourceList{name: resource.MustParse("0")}
	g.Expect(advertised(node, &two)).To(BeFalse(), "zeroed by a kubelet")
	node.Status.Allocatable[name] = two
	g.Expect(advertised(node, &two)).To(BeTrue())
	g.Expect(advertised(node, nil)).To(BeFalse(), "a node no longer Apple hardware loses them")
}

func TestObserveDrain(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	class := &macvirtv1alpha1.MacClass{}
	class.Spec.Lifecycle.DrainGracePeriod = &metav1.Duration{Duration: time.Hour}
	vmi := func(node string, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{}
		v.Status.EvacuationNodeName, v.Status.Phase = node, phase
		return v
	}
	machine := func(bound bool, drainingSince *time.Time) *macvirtv1alpha1.MacMachine {
		m := &macvirtv1alpha1.MacMachine{}
		if bound {
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team", Name: "c"}
		}
		if drainingSince != nil {
			meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining,
				Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonEvacuationRequested, LastTransitionTime: metav1.NewTime(*drainingSince)})
		}
		return m
	}
	tenMinutesAgo, twoHoursAgo := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	for name, tc := range map[string]struct {
		o    machineObservation
		want drainState
	}{
		"not marked":  {o: machineObservation{Now: now, Class: class, Machine: machine(true, nil), VMI: vmi("", kubevirtv1.Running)}},
		"no instance": {o: machineObservation{Now: now, Class: class, Machine: machine(true, &tenMinutesAgo)}},
		"an idle machine stops at once": {o: machineObservation{Now: now, Class: class, Machine: machine(false, nil), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: drainState{Node: "mac-1", Since: now, Grace: time.Hour, Stop: true}},
		"a bound machine waits for its grace, counted from the first sight": {
			o:    machineObservation{Now: now, Class: class, Machine: machine(true, &tenMinutesAgo), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: drainState{Node: "mac-1", Since: tenMinutesAgo, Grace: time.Hour, Bound: true, RecheckAfter: 50 * time.Minute}},
		"a bound machine stops once its grace is over": {
			o:    machineObservation{Now: now, Class: class, Machine: machine(true, &twoHoursAgo), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: drainState{Node: "mac-1", Since: twoHoursAgo, Grace: time.Hour, Bound: true, Stop: true}},
		"a finished instance no longer drains": {
			o: machineObservation{Now: now, Class: class, Machine: machine(true, &twoHoursAgo), VMI: vmi("mac-1", kubevirtv1.Succeeded)}},
		"a deleting machine is stopped by its deletion": {
			o: machineObservation{Now: now, Class: class, Deleting: true, Machine: machine(false, nil), VMI: vmi("mac-1", kubevirtv1.Running)}},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(observeDrain(tc.o)).To(Equal(tc.want))
		})
	}
}

func TestHostDrainingConditionAndWarning(t *testing.T) {
	g := NewWithT(t)
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var conds []metav1.Condition
	waiting := drainState{Node: "mac-1", Since: since, Grace: time.Hour, Bound: true, RecheckAfter: time.Hour}
	setHostDraining(&conds, waiting, 1, since)
	c := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(macvirtv1alpha1.ReasonEvacuationRequested))
	g.Expect(c.Message).To(ContainSubstring("until 2026-12-01T13:00:00Z (drainGracePeriod 1h0m0s)"))
	reason, note, ok := drainWarning(nil, conds)
	g.Expect(ok).To(BeTrue())
	g.Expect(reason).To(Equal(macvirtv1alpha1.ConditionHostDraining))
	g.Expect(note).To(Equal(c.Message))
	_, _, again := drainWarning(conds, conds)
	g.Expect(again).To(BeFalse(), "one event per transition")

	before := append([]metav1.Condition(nil), conds...)
	stopping := waiting
	stopping.Stop, stopping.RecheckAfter = true, 0
	setHostDraining(&conds, stopping, 1, since.Add(2*time.Hour))
	c = meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
	g.Expect(c.Reason).To(Equal(macvirtv1alpha1.ReasonDrainStop))
	g.Expect(c.LastTransitionTime.Time).To(Equal(since), "still True: the drain's start is kept")
	_, note, ok = drainWarning(before, conds)
	g.Expect(ok).To(BeTrue())
	g.Expect(note).To(ContainSubstring("shut down gracefully now"))

	setHostDraining(&conds, drainState{}, 1, since.Add(3*time.Hour))
	g.Expect(meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)).To(BeNil())

	var claim []metav1.Condition
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "pool", Name: "m"}}
	m.Status.Conditions = before
	mirrorHostDraining(&claim, m, 4)
	g.Expect(meta.FindStatusCondition(claim, macvirtv1alpha1.ConditionHostDraining).Message).To(HavePrefix("machine pool/m: node mac-1 is being drained"))
	mirrorHostDraining(&claim, nil, 4)
	g.Expect(claim).To(BeEmpty())
}

func TestSlotsProblem(t *testing.T) {
	g := NewWithT(t)
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	node := func(n string, slots int64, cordoned bool) corev1.Node {
		node := corev1.Node{}
		node.Name, node.Spec.Unschedulable = n, cordoned
		if slots >= 0 {
			node.Status.Allocatable = corev1.ResourceList{name: *resource.NewQuantity(slots, resource.DecimalSI)}
		}
		return node
	}
	vmi := func(n string, phase kubevirtv1.VirtualMachineInstancePhase) kubevirtv1.VirtualMachineInstance {
		v := kubevirtv1.VirtualMachineInstance{}
		v.Spec.Domain.Resources.Limits = corev1.ResourceList{name: resource.MustParse("1")}
		v.Status.NodeName, v.Status.Phase = n, phase
		return v
	}
	use := slotUse([]corev1.Node{node("mac-2", 2, true), node("mac-1", 2, false), node("mac-3", -1, false)},
		[]kubevirtv1.VirtualMachineInstance{vmi("mac-1", kubevirtv1.Running), vmi("mac-1", kubevirtv1.Scheduled),
			vmi("mac-2", kubevirtv1.Running), vmi("mac-2", kubevirtv1.Succeeded), {}})
	g.Expect(use).To(Equal([]nodeSlotUse{{Node: "mac-1", Slots: 2, Used: 2}, {Node: "mac-2", Slots: 2, Used: 1, Cordoned: true},
		{Node: "mac-3", NotListed: true}}))
	p := slotsProblem(1, use, nil)
	g.Expect(p.Reason).To(Equal(macvirtv1alpha1.ReasonMacOSSlotsExhausted))
	g.Expect(p.Message).To(ContainSubstring("1 machine(s) cannot be scheduled"))
	g.Expect(p.Message).To(ContainSubstring("free slots per node: mac-1 0 of 2 free, mac-2 1 of 2 free (cordoned), mac-3 advertises no macvirt.io/macos-slots yet"))
	g.Expect(slotsProblem(0, use, nil)).To(BeNil())
	g.Expect(slotsProblem(2, nil, nil).Message).To(ContainSubstring("no node is labelled macvirt.io/apple-hardware=true"))

	waiting := macvirtv1alpha1.MacMachine{}
	meta.SetStatusCondition(&waiting.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted})
	bound := *waiting.DeepCopy()
	bound.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Name: "c"}
	g.Expect(waitingForSlots([]macvirtv1alpha1.MacMachine{waiting, bound, {}})).To(Equal(1))
	g.Expect(slotsExhausted("0/1 nodes are available: 1 Insufficient macvirt.io/macos-slots.")).To(BeTrue())
	g.Expect(slotsExhausted("0/1 nodes are available: 1 Insufficient cpu.")).To(BeFalse())
	g.Expect(strings.Count(p.Message, "docs/licensing.md")).To(Equal(1))
}
