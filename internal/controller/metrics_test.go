package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
