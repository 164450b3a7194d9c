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
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

const slots = corev1.ResourceName("macvirt.io/macos-slots")

func appleNode(name string, n int64, mods ...func(*corev1.Node)) corev1.Node {
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appleHardwareLabel: "true"}}}
	node.Spec.Taints = []corev1.Taint{{Key: appleHardwareLabel, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if n >= 0 {
		node.Status.Allocatable = corev1.ResourceList{slots: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	for _, mod := range mods {
		mod(&node)
	}
	return node
}

// macVMI is an instance as macvirt renders it: one slot, the Apple node
// selector and toleration.
func macVMI(uid string, node string, phase kubevirtv1.VirtualMachineInstancePhase) kubevirtv1.VirtualMachineInstance {
	one := resource.MustParse("1")
	vmi := kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}}
	vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{slots: one}
	vmi.Spec.Domain.Resources.Limits = corev1.ResourceList{slots: one}
	vmi.Spec.NodeSelector = map[string]string{appleHardwareLabel: "true"}
	vmi.Spec.Tolerations = []corev1.Toleration{{Key: appleHardwareLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	vmi.Status.NodeName, vmi.Status.Phase = node, phase
	return vmi
}

func TestScheduleFiltersNodesAndCountsSlots(t *testing.T) {
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	unlabelled := func(n *corev1.Node) { n.Labels = nil }
	untainted := func(n *corev1.Node) { n.Spec.Taints = nil }
	for name, tc := range map[string]struct {
		nodes  []corev1.Node
		placed []kubevirtv1.VirtualMachineInstance
		vmi    kubevirtv1.VirtualMachineInstance
		// volumeNode is the node selected for the pod's volumes.
		volumeNode string
		want       placement
	}{
		"a free slot": {
			nodes: []corev1.Node{appleNode("a", 2)}, vmi: macVMI("new", "", kubevirtv1.Scheduling),
			want: placement{Node: "a"},
		},
		"the node with the most free slots wins": {
			nodes:  []corev1.Node{appleNode("a", 2), appleNode("b", 2)},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "a", kubevirtv1.Running)},
			vmi:    macVMI("new", "", kubevirtv1.Scheduling), want: placement{Node: "b"},
		},
		"finished instances free their slot": {
			nodes: []corev1.Node{appleNode("a", 2)},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "a", kubevirtv1.Succeeded), macVMI("2", "a", kubevirtv1.Failed),
				macVMI("3", "a", kubevirtv1.Running)},
			vmi: macVMI("new", "", kubevirtv1.Scheduling), want: placement{Node: "a"},
		},
		"two slots taken": {
			nodes:  []corev1.Node{appleNode("a", 2)},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "a", kubevirtv1.Running), macVMI("2", "a", kubevirtv1.Scheduled)},
			vmi:    macVMI("new", "", kubevirtv1.Scheduling),
			want: placement{Message: "0/1 nodes are available: 1 Insufficient macvirt.io/macos-slots. " +
				"preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		},
		"a node that advertises no slots": {
			nodes: []corev1.Node{appleNode("a", -1)}, vmi: macVMI("new", "", kubevirtv1.Scheduling),
			want: placement{Message: "0/1 nodes are available: 1 Insufficient macvirt.io/macos-slots. " +
				"preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."},
		},
		"each node says why, counted and sorted": {
			nodes: []corev1.Node{appleNode("a", 2, cordoned), appleNode("b", 1), appleNode("c", 2, unlabelled, untainted),
				appleNode("d", 2, func(n *corev1.Node) { n.Spec.Taints[0].Key = "other" })},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "b", kubevirtv1.Running)},
			vmi:    macVMI("new", "", kubevirtv1.Scheduling),
			want: placement{Message: "0/4 nodes are available: 1 Insufficient macvirt.io/macos-slots, 1 node(s) didn't match Pod's node affinity/selector, " +
				"1 node(s) had untolerated taint(s), 1 node(s) were unschedulable. " +
				"preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."},
		},
		"no nodes": {
			vmi: macVMI("new", "", kubevirtv1.Scheduling), want: placement{Message: "no nodes available to schedule pods"},
		},
		"volumes given a node pin the pod there, even to a node with fewer free slots": {
			nodes:  []corev1.Node{appleNode("a", 2), appleNode("b", 2)},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "a", kubevirtv1.Running)},
			vmi:    macVMI("new", "", kubevirtv1.Scheduling), volumeNode: "a", want: placement{Node: "a"},
		},
		"volumes given a full node leave the pod unschedulable": {
			nodes:  []corev1.Node{appleNode("a", 1), appleNode("b", 2)},
			placed: []kubevirtv1.VirtualMachineInstance{macVMI("1", "a", kubevirtv1.Running)},
			vmi:    macVMI("new", "", kubevirtv1.Scheduling), volumeNode: "a",
			want: placement{Message: "0/2 nodes are available: 1 Insufficient macvirt.io/macos-slots, 1 node(s) had volume node affinity conflict. " +
				"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			vmi := tc.vmi
			placed := []workload{}
			for i := range tc.placed {
				placed = append(placed, instanceWorkload(&tc.placed[i]))
			}
			w := instanceWorkload(&vmi)
			w.VolumeNode = tc.volumeNode
			g.Expect(schedule(w, tc.nodes, placed)).To(Equal(tc.want))
		})
	}
}

func TestTheKubeletKeepsResourcesItDoesNotOwn(t *testing.T) {
	g := NewWithT(t)
	node := appleNode("a", 2)
	node.Status.Capacity = corev1.ResourceList{slots: resource.MustParse("2")}
	node.Status.Allocatable["stale.example.com/gone"] = resource.MustParse("1")
	setKubeletStatus(&node)
	g.Expect(node.Status.Capacity).To(HaveKey(slots))
	g.Expect(node.Status.Allocatable).To(HaveKeyWithValue(slots, resource.MustParse("2")))
	g.Expect(node.Status.Allocatable).NotTo(HaveKey(corev1.ResourceName("stale.example.com/gone")),
		"allocatable keys missing from capacity are dropped")
	g.Expect(node.Status.Capacity).To(HaveKey(corev1.ResourceCPU))
}
