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
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/sandbox"
)

var (
	testCluster *cluster.Cluster
	scheme      *runtime.Scheme
	admin       client.WithWatch
	system      *sandbox.System
	stopAll     context.CancelFunc
	ctx         context.Context
)

func TestKubeVirt(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Machines under KubeVirt's own control plane")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	var err error
	scheme, err = macvirtscheme.New()
	Expect(err).NotTo(HaveOccurred())
	// KubeVirt's Sidecar gate on, as docs/install.md asks of a cluster
	// without the Plugins gate: the operator then adds its domain hook as a
	// sidecar.
	testCluster, err = cluster.StartWithKubeVirt(scheme, cluster.KubeVirtOptions{FeatureGates: []string{"Sidecar"}})
	Expect(err).NotTo(HaveOccurred())
	admin, err = client.NewWithWatch(testCluster.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	ctx, stopAll = context.WithCancel(context.Background())
	system, err = sandbox.StartSystem(ctx, testCluster.Config, scheme, sandbox.SystemOptions{
		Options: sandbox.Options{Speed: 4, AppleNodes: 2}})
	Expect(err).NotTo(HaveOccurred())
	Expect(sandbox.ApplySamples(ctx, admin, 1)).To(Succeed())
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

var _ = AfterSuite(func() {
	if stopAll != nil {
		stopAll()
	}
	if system != nil {
		system.Stop()
	}
	if testCluster != nil {
		if failed {
			GinkgoWriter.Println(testCluster.KubeVirtLogs())
		}
		Expect(testCluster.Stop()).To(Succeed())
	}
})
