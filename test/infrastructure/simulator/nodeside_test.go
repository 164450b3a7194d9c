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

package simulator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/vmstop"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// TestTheNodesUnderKubeVirtsOwnControlPlane runs the simulator's node side
// (scheduler, kubelet, virt-handler) under KubeVirt's own virt-api and
// virt-controller: virt-controller makes the instance and its launcher pod,
// the simulated node runs them, and a stop through virt-api's subresource
// shuts the domain down gracefully before the pod and the instance go; a
// lost node's instance is failed by virt-controller's node controller.
func TestTheNodesUnderKubeVirtsOwnControlPlane(t *testing.T) {
	world := harness.ForTest(t, harness.Options{Simulator: &simulator.Options{StartDelay: 300 * time.Millisecond, ShutdownDelay: time.Second}})
	ctx, cancel := context.WithTimeout(world.Ctx, 3*time.Minute)
	defer cancel()
	c, sim := world.Admin, world.Simulator

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "builds"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "build-1"},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](30),
				Domain: kubevirtv1.DomainSpec{
					Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
					Devices:   kubevirtv1.Devices{Disks: []kubevirtv1.Disk{{Name: "root"}}},
				},
				Volumes: []kubevirtv1.Volume{{Name: "root",
					VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "example.com/macos:15"}}}},
			}},
		},
	}
	if err := c.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	pod := &corev1.Pod{}
	eventually(ctx, t, "the VMI runs on the simulated node with the pod's address", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
			return err
		}
		if vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI phase %q", vmi.Status.Phase)
		}
		if vmi.Status.NodeName != simulator.DefaultNodeName {
			return fmt.Errorf("VMI on node %q", vmi.Status.NodeName)
		}
		if len(vmi.Status.Interfaces) != 1 {
			return fmt.Errorf("interfaces %+v, want one", vmi.Status.Interfaces)
		}
		return nil
	})
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns.Name), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d launcher pods, want 1", len(pods.Items))
	}
	*pod = pods.Items[0]
	if pod.Spec.NodeName != simulator.DefaultNodeName || pod.Status.Phase != corev1.PodRunning {
		t.Errorf("launcher pod on %q in phase %q, want Running on %s", pod.Spec.NodeName, pod.Status.Phase, simulator.DefaultNodeName)
	}
	firstIP := vmi.Status.Interfaces[0].IP
	if !strings.HasPrefix(pod.Status.PodIP, "10.244.") || firstIP != pod.Status.PodIP {
		t.Errorf("pod IP %q, the VMI's interface %q; want the pod's own address on the pod network in both", pod.Status.PodIP, firstIP)
	}
	eventually(ctx, t, "virt-controller reads the VM Ready from the pod", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if !vm.Status.Ready || vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusRunning {
			return fmt.Errorf("VM ready %v, printableStatus %q", vm.Status.Ready, vm.Status.PrintableStatus)
		}
		return nil
	})

	// Every phase the VMI passes through from here, as a watch delivers it.
	w, err := c.Watch(ctx, &kubevirtv1.VirtualMachineInstanceList{}, client.InNamespace(ns.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The node goes quiet and its launcher pod is gone: virt-controller's
	// node controller fails the instance, and runStrategy Always starts
	// another.
	lost := vmi.UID
	sim.Inject(simulator.Fault{Kind: simulator.NodeLost, Namespace: vm.Namespace, Name: vm.Name})
	var reason string
	for ev := range w.ResultChan() {
		if v, ok := ev.Object.(*kubevirtv1.VirtualMachineInstance); ok && v.UID == lost && v.Status.Phase == kubevirtv1.Failed {
			reason = v.Status.Reason
			break
		}
	}
	if reason != "NodeUnresponsive" {
		t.Errorf("the lost node's VMI failed with reason %q, want NodeUnresponsive", reason)
	}
	eventually(ctx, t, "a new VMI runs", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
			return err
		}
		if vmi.UID == lost || vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s in phase %q", vmi.UID, vmi.Status.Phase)
		}
		return nil
	})
	// The new launcher pod has an address of its own, and the VMI says so.
	if err := c.List(ctx, pods, client.InNamespace(ns.Name), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || len(vmi.Status.Interfaces) != 1 || vmi.Status.Interfaces[0].IP != pods.Items[0].Status.PodIP ||
		vmi.Status.Interfaces[0].IP == firstIP {
		t.Errorf("the new VMI's interfaces %+v, its pods %d; want the new pod's IP, not the lost one's %s",
			vmi.Status.Interfaces, len(pods.Items), firstIP)
	}
	stopper, err := vmstop.NewRESTStopper(world.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, pods, client.InNamespace(ns.Name), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("the new VMI's launcher pods: %v, %v", pods.Items, err)
	}
	*pod = pods.Items[0]
	if err := stopper.Stop(ctx, vm.Namespace, vm.Name, 30); err != nil {
		t.Fatalf("the stop subresource: %v", err)
	}
	eventually(ctx, t, "the domain shuts down and the pod and the VMI go", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
		if err == nil {
			return fmt.Errorf("VMI still there, phase %q", vmi.Status.Phase)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		err = c.Get(ctx, client.ObjectKeyFromObject(pod), pod)
		if err == nil {
			return fmt.Errorf("launcher pod still there, phase %q", pod.Status.Phase)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	var phases []kubevirtv1.VirtualMachineInstancePhase
	for ev := range w.ResultChan() {
		v, ok := ev.Object.(*kubevirtv1.VirtualMachineInstance)
		if !ok || v.UID != vmi.UID {
			continue
		}
		if n := len(phases); n == 0 || phases[n-1] != v.Status.Phase {
			phases = append(phases, v.Status.Phase)
		}
		if ev.Type == "DELETED" {
			break
		}
	}
	// The new VMI's start is in the watch too: what follows Running counts.
	if i := slices.Index(phases, kubevirtv1.Running); i > 0 {
		phases = phases[i:]
	}
	if want := []kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Running, kubevirtv1.Succeeded}; fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("the VMI went through %v after the stop, want %v: a graceful shutdown", phases, want)
	}
	eventually(ctx, t, "virt-controller reports the VM stopped", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStopped {
			return fmt.Errorf("printableStatus %q", vm.Status.PrintableStatus)
		}
		return nil
	})
}

// eventually polls check until it passes or ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
