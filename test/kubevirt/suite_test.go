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

// Package kubevirt_test runs macvirt's machines under KubeVirt's own
// control plane: virt-api admits (or refuses) every VM and serves the stop
// subresource, virt-controller turns VMs into instances and virt-launcher
// pods, and the simulator plays only the nodes (scheduler, kubelet,
// virt-handler, the guests) and CDI.
package kubevirt_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The suite's world: macvirt at work, with two Apple nodes, on KubeVirt's
// own control plane with its Sidecar gate on, as docs/install.md asks of a
// cluster without the Plugins gate: the operator then adds its domain hook
// as a sidecar.
var (
	world *harness.World
	admin client.WithWatch
	ctx   context.Context
)

func TestKubeVirt(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Machines under KubeVirt's own control plane")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter,
		KubeVirt: cluster.KubeVirtOptions{FeatureGates: []string{"Sidecar"}},
		System:   &harness.SystemOptions{Speed: 4, AppleNodes: 2}, Samples: &harness.SampleOptions{Machines: 1}})
	admin, ctx = world.Admin, world.Ctx
})

// failed records a failed spec, for AfterSuite to print KubeVirt's logs.
var failed bool

var _ = JustAfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	failed = true
	dump()
})

// dump prints what KubeVirt and the nodes made, for a failed spec.
func dump() {
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if admin.List(ctx, vmis) == nil {
		for _, v := range vmis.Items {
			GinkgoWriter.Printf("VMI %s/%s phase %q node %q conditions %+v\n", v.Namespace, v.Name, v.Status.Phase, v.Status.NodeName, v.Status.Conditions)
		}
	}
	pods := &corev1.PodList{}
	if admin.List(ctx, pods) == nil {
		for _, p := range pods.Items {
			GinkgoWriter.Printf("pod %s/%s node %q selector %v affinity %+v phase %q conditions %+v\n", p.Namespace, p.Name, p.Spec.NodeName,
				p.Spec.NodeSelector, p.Spec.Affinity, p.Status.Phase, p.Status.Conditions)
		}
	}
	nodes := &corev1.NodeList{}
	if admin.List(ctx, nodes) == nil {
		for _, n := range nodes.Items {
			GinkgoWriter.Printf("node %s labels %v taints %v allocatable %v\n", n.Name, n.Labels, n.Spec.Taints, n.Status.Allocatable)
		}
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if admin.List(ctx, vms) == nil {
		for _, v := range vms.Items {
			GinkgoWriter.Printf("VM %s/%s %q conditions %+v\n", v.Namespace, v.Name, v.Status.PrintableStatus, v.Status.Conditions)
		}
	}
}

// KubeVirt's own logs go with a failed suite, before the world stops.
var _ = AfterSuite(func() {
	if failed && world != nil {
		GinkgoWriter.Println(world.Cluster.KubeVirtLogs())
	}
})
