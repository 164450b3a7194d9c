package nodeslots

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
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
	forged := *old.DeepCopy()
	forged.Name = "forged"
	ours := func(v *kubevirtv1.VirtualMachineInstance) bool { return v.Name != "forged" }
	g.Expect(countHeld([]kubevirtv1.VirtualMachineInstance{requesting, old, done, {}, forged}, ours)).To(Equal(heldSlots{Requested: 1, Unrequested: 1}),
		"a labelled instance that is not macvirt's holds no slot")
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
