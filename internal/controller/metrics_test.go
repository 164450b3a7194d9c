package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestMachineCollectorCountsMachinesByNamespaceAndPhase(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	mk := func(ns, name string, phase macvirtv1alpha1.MachinePhase) *macvirtv1alpha1.MacMachine {
		return &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: macvirtv1alpha1.MacMachineStatus{Phase: phase}}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		mk("pools", "a", macvirtv1alpha1.MachineReady), mk("pools", "b", macvirtv1alpha1.MachineReady),
		mk("pools", "c", macvirtv1alpha1.MachineProvisioning), mk("team", "d", "")).Build()
	want := `
# HELP macvirt_machines MacMachines by namespace and phase, as the operator's cache holds them.
# TYPE macvirt_machines gauge
macvirt_machines{namespace="pools",phase="Provisioning"} 1
macvirt_machines{namespace="pools",phase="Ready"} 2
macvirt_machines{namespace="team",phase="Pending"} 1
`
	if err := testutil.CollectAndCompare(&machineCollector{reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestSlotsCollectorReportsEachAppleNode(t *testing.T) {
	node := func(name string, apple bool, slots string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if apple {
			n.Labels = map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}
		}
		n.Status.Allocatable = corev1.ResourceList{macvirtv1alpha1.ResourceMacOSSlots: resource.MustParse(slots)}
		return n
	}
	vmi := func(name, node string, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "pools", Name: name}}
		v.Spec.Domain.Resources.Requests = corev1.ResourceList{macvirtv1alpha1.ResourceMacOSSlots: resource.MustParse("1")}
		v.Status.NodeName, v.Status.Phase = node, phase
		return v
	}
	// The operator's cache, with its index of instances by node.
	c := fakeClient(t, node("mac-1", true, "2"), node("mac-2", true, "1"), node("linux", false, "5"),
		vmi("a", "mac-1", kubevirtv1.Running), vmi("b", "mac-1", kubevirtv1.Scheduled), vmi("c", "mac-2", kubevirtv1.Succeeded))
	want := `
# HELP macvirt_node_macos_slots macOS slots each Apple node advertises (its allocatable macvirt.io/macos-slots).
# TYPE macvirt_node_macos_slots gauge
macvirt_node_macos_slots{node="mac-1"} 2
macvirt_node_macos_slots{node="mac-2"} 1
# HELP macvirt_node_macos_slots_used macOS slots held on each Apple node by unfinished VirtualMachineInstances that request one.
# TYPE macvirt_node_macos_slots_used gauge
macvirt_node_macos_slots_used{node="mac-1"} 2
macvirt_node_macos_slots_used{node="mac-2"} 0
`
	if err := testutil.CollectAndCompare(&slotsCollector{reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
