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

package hosts_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// The suite's world: a real API server with macvirt's CRDs and webhooks,
// the operator with its agent endpoint (which a spec stops and starts
// again), and, for each spec, fake Macs: host agents in this process
// driving the fake tart command, which keeps its VMs in a temporary
// TART_HOME and runs each VM as a process, as tart does.
var (
	world  *harness.World
	admin  client.Client
	system *harness.System
	ctx    context.Context
)

// image is the Virtualization classes' VM image, which the fake tart can
// clone.
const image = "ghcr.io/cirruslabs/macos-sequoia-base:latest"

// lease is the fake hosts' lease; the shortest the API allows, so a lost
// host is seen soon.
const lease = 10 * time.Second

func TestMain(m *testing.M) {
	// The guests' GitHub runner is this binary in its role (harness.CIClass's
	// golden image carries its run.sh; so does every fake Mac's VM).
	if code, played := harness.PlayGuestRole(); played {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// githubToken is the token the fake GitHub accepts.
const githubToken = "github_pat_macvirt_hosts_test" //nolint:gosec // the fake GitHub's, not a credential.

func TestHosts(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Apple-silicon Hosts Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	// The operator runs as its service account under the shipped role: the
	// Apple-silicon path uses rights no other suite's operator does (the
	// TokenReview of a host agent's token).
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter, OperatorAccount: true,
		System: &harness.SystemOptions{Speed: 4, Network: true, RunnerSets: operator.RunnerSetOptions{
			Client:  github.Options{RetryMax: 1, RetryWaitMax: 200 * time.Millisecond, Timeout: 20 * time.Second},
			Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, Resync: 2 * time.Second}},
		GitHub: &fakegithub.Options{Tokens: []string{githubToken}, PollWait: time.Second, SessionTTL: 15 * time.Second, LostRunnerGrace: 2 * time.Second}})
	admin, system, ctx = world.Admin, world.System, world.Ctx
})

// startMacs runs the spec's fake Macs (harness.StartMacs): each a MacHost
// with the spec's label (so only the spec's class selects it), the real
// host agent and tart driver against the fake tart, and a guest for each
// running VM that heartbeats to the operator's endpoint with the real
// agent's client. They stop with the spec.
func startMacs(spec string, cordoned []string, names ...string) *harness.Macs {
	m, err := harness.StartMacs(ctx, world.Config, admin, harness.MacsOptions{Names: names, Cordoned: cordoned,
		Labels: map[string]string{"test.macvirt.io/spec": spec}, Lease: lease, Images: []string{image}, Dir: GinkgoT().TempDir(),
		Endpoint: system.AgentEndpoint, CABundle: system.CABundle, GuestFiles: world.Simulator.GuestFiles()})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(m.Stop)
	return m
}

// running counts the VMs a Mac's tart runs.
func running(m *harness.Macs, name string) int {
	n, err := m.Running(ctx, name)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// vzClass makes a Virtualization class that selects the spec's hosts; its
// claims bind only its pools' machines.
func vzClass(spec string) string {
	return vzClassOf(spec, spec, image, func(s *macvirtv1alpha1.MacClassSpec) { s.Tenancy.OnDemand = ptr.To(false) })
}

// vzClassOf makes the Virtualization class name of img that selects the
// spec's hosts, as mod changes it (nil: as it is), gone with the spec.
func vzClassOf(name, spec, img string, mod func(*macvirtv1alpha1.MacClassSpec)) string {
	c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: macvirtv1alpha1.MacClassSpec{
			Runtime: macvirtv1alpha1.RuntimeVirtualization,
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{Source: &cdiv1.DataVolumeSource{
				Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + img)}}}},
			Placement: macvirtv1alpha1.PlacementSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test.macvirt.io/spec": spec}}},
		}}
	if mod != nil {
		mod(&c.Spec)
	}
	Expect(admin.Create(ctx, c)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, c))).To(Succeed()) })
	return c.Name
}

// claimOf makes claim ns/name of the class.
func claimOf(ns, name, class string) *macvirtv1alpha1.MacClaim {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: class}}
	Expect(admin.Create(ctx, claim)).To(Succeed())
	return claim
}

// awaitReady waits until the claim is Ready, and says how long that took.
func awaitReady(claim *macvirtv1alpha1.MacClaim) time.Duration {
	start := time.Now()
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		r := meta.FindStatusCondition(claim.Status.Conditions, macvirtv1alpha1.ConditionReady)
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.Status).To(Equal(metav1.ConditionTrue), "%s: %s", r.Reason, r.Message)
	}).Should(Succeed())
	return time.Since(start)
}

// machineOf waits until the claim is bound, and reads its machine.
func machineOf(claim *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
		g.Expect(claim.Status.MachineRef).NotTo(BeNil())
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, m)).To(Succeed())
	}).Should(Succeed())
	return m
}

// namespace makes the spec's tenant namespace.
func namespace(name string) string {
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// pool makes a pool of the class in the operator's pools namespace.
func pool(name, class string, idle int32) *macvirtv1alpha1.MacPool {
	p := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class, Idle: ptr.To(idle)}}
	Expect(admin.Create(ctx, p)).To(Succeed())
	DeferCleanup(func() { deleteAndWait(p) })
	return p
}

// awaitIdle waits until the pool has n idle Macs.
func awaitIdle(p *macvirtv1alpha1.MacPool, n int32) {
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(p.Status.Idle).To(Equal(n))
	}).Should(Succeed())
}

// deleteAndWait deletes obj and waits until it is gone.
func deleteAndWait(obj client.Object) {
	Expect(client.IgnoreNotFound(admin.Delete(ctx, obj))).To(Succeed())
	Eventually(func() bool {
		return client.IgnoreNotFound(admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)) == nil &&
			admin.Get(ctx, client.ObjectKeyFromObject(obj), obj) != nil
	}).Should(BeTrue(), "%T %s is not gone", obj, obj.GetName())
}

// machinesOf lists the machines of a class.
func machinesOf(class string) []macvirtv1alpha1.MacMachine {
	list := &macvirtv1alpha1.MacMachineList{}
	Expect(admin.List(ctx, list)).To(Succeed())
	var out []macvirtv1alpha1.MacMachine
	for _, m := range list.Items {
		if m.Spec.ClassName == class {
			out = append(out, m)
		}
	}
	return out
}

// perHost counts a class's machines by host ("" for unplaced).
func perHost(class string) map[string]int {
	n := map[string]int{}
	for _, m := range machinesOf(class) {
		n[m.Spec.HostName]++
	}
	return n
}

func readyReason(m *macvirtv1alpha1.MacMachine) string {
	for _, c := range m.Status.Conditions {
		if c.Type == macvirtv1alpha1.ConditionReady {
			return fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return ""
}
