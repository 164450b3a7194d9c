package nodeslots

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/slots"
)

// heldSlots counts the unfinished macOS VMs on a node: those whose pod
// requests a slot, and macvirt's VMs started before VMs requested one.
type heldSlots struct {
	Requested, Unrequested int64
}

// nodeSlots is what a node should advertise.
type nodeSlots struct {
	// Want is the slot count to advertise; nil removes the resource.
	Want *resource.Quantity
	// Invalid says why the node's own setting was ignored ("" when valid
	// or absent).
	Invalid string
	// Adjusted says why Want differs from the node's setting ("" when it
	// does not).
	Adjusted string
}

// computeNodeSlots decides the node's slots from its labels and
// annotations: none for a node not labelled as Apple hardware, the
// annotation's (or else the label's) whole number from 0 to MaxMacOSSlots,
// or DefaultMacOSSlots, also when the setting is invalid (which is said).
// Then it is adjusted for the macOS VMs the node runs: lowered by those
// that hold a licence without requesting a slot (started before VMs did),
// and never below the slots requested by running VMs, because a restarting
// kubelet admits its running pods again against allocatable and would
// reject (kill) those that no longer fit.
func computeNodeSlots(node *corev1.Node, held heldSlots) nodeSlots {
	if node.Labels[macvirtv1alpha1.LabelAppleHardware] != "true" {
		if held.Requested > 0 {
			// Still running Macs: keep them admittable.
			return nodeSlots{Want: resource.NewQuantity(held.Requested, resource.DecimalSI), Adjusted: fmt.Sprintf(
				"node %s is not labelled %s=true but runs %d macOS VMs that hold a slot: advertising %d until they stop",
				node.Name, macvirtv1alpha1.LabelAppleHardware, held.Requested, held.Requested)}
		}
		return nodeSlots{}
	}
	want := int64(macvirtv1alpha1.DefaultMacOSSlots)
	var invalid string
	key := macvirtv1alpha1.AnnotationMacOSSlots
	raw, source := node.Annotations[key], "annotation"
	if _, ok := node.Annotations[key]; !ok {
		raw, source = node.Labels[key], "label"
	}
	if raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 || n > macvirtv1alpha1.MaxMacOSSlots {
			invalid = fmt.Sprintf("%s %s=%q on node %s is not a whole number from 0 to %d; advertising the default, %d macOS slots, until it is fixed (kubectl annotate node %s %s=2 --overwrite)",
				source, key, raw, node.Name, macvirtv1alpha1.MaxMacOSSlots, macvirtv1alpha1.DefaultMacOSSlots, node.Name, key)
		} else {
			want = n
		}
	}
	out := nodeSlots{Invalid: invalid}
	adjusted := max(held.Requested, want-held.Unrequested, 0)
	switch {
	case held.Requested+held.Unrequested > want && held.Requested <= want && held.Unrequested > 0:
		out.Adjusted = fmt.Sprintf("node %s runs %d macOS VMs, %d of them started before VMs requested a slot, more than its %d slots: "+
			"advertising %d until some stop", node.Name, held.Requested+held.Unrequested, held.Unrequested, want, adjusted)
	case adjusted > want:
		out.Adjusted = fmt.Sprintf("node %s runs %d macOS VMs that hold a slot, more than the %d it should advertise: advertising %d until some stop, "+
			"so that a kubelet restart does not reject (kill) running ones", node.Name, held.Requested, want, adjusted)
	case adjusted < want && held.Unrequested > 0:
		out.Adjusted = fmt.Sprintf("node %s runs %d macOS VMs started before VMs requested a slot: advertising %d of its %d slots until they restart",
			node.Name, held.Unrequested, adjusted, want)
	}
	out.Want = resource.NewQuantity(adjusted, resource.DecimalSI)
	return out
}

// countHeld counts the unfinished instances that hold a macOS slot: those
// requesting one, and macvirt's that do not (ours says which are macvirt's:
// a label is not enough, as anyone who may create VMIs can set it).
func countHeld(vmis []kubevirtv1.VirtualMachineInstance, ours func(*kubevirtv1.VirtualMachineInstance) bool) heldSlots {
	var h heldSlots
	for i := range vmis {
		v := &vmis[i]
		if v.IsFinal() {
			continue
		}
		n, ok := slots.Requested(v)
		switch {
		case ok:
			h.Requested += n
		case v.Labels[macvirtv1alpha1.LabelMachine] != "" && ours(v):
			h.Unrequested++
		}
	}
	return h
}

// advertised reports whether capacity and allocatable already say want.
func advertised(node *corev1.Node, want *resource.Quantity) bool {
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	for _, list := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		q, ok := list[name]
		switch {
		case want == nil && ok, want != nil && !ok:
			return false
		case want != nil && q.Cmp(*want) != 0:
			return false
		}
	}
	return true
}
