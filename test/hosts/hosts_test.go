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
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

var _ = Describe("Machines on Apple-silicon hosts", func() {
	It("fills a pool of 3 on two hosts 2+1, and a machine with every host full waits saying why", func() {
		const spec = "fill"
		const a, b = "fill-mac-a", "fill-mac-b"
		macs := startMacs(spec, nil, a, b)
		class := vzClass(spec)

		By("a pool of 3: two on one host, one on the other, all Ready")
		p := pool(spec, class, 3)
		awaitIdle(p, 3)
		Expect(perHost(class)).To(Equal(map[string]int{a: 2, b: 1}))
		Expect(running(macs, a)).To(Equal(2), "the first host's tart runs its two VMs")
		Expect(running(macs, b)).To(Equal(1))

		By("a pool of 2 more: one takes the last slot, the other waits and names both hosts full")
		q := pool(spec+"-more", class, 2)
		var waiting *macvirtv1alpha1.MacMachine
		Eventually(func(g Gomega) {
			for _, m := range machinesOf(class) {
				if m.Spec.HostName == "" {
					waiting = m.DeepCopy()
				}
			}
			g.Expect(waiting).NotTo(BeNil())
			g.Expect(waiting.Status.Phase).To(Equal(macvirtv1alpha1.MachinePending))
			g.Expect(readyReason(waiting)).To(And(HavePrefix(macvirtv1alpha1.ReasonNoHostAvailable),
				ContainSubstring(a+": full (2 of 2 slots taken)"), ContainSubstring(b+": full (2 of 2 slots taken)")))
		}).Should(Succeed())
		Expect(perHost(class)).To(Equal(map[string]int{a: 2, b: 2, "": 1}))
		GinkgoWriter.Printf("waiting machine %s: %s\n", waiting.Name, readyReason(waiting))
		// The fourth VM may still be starting (its configuration is fetched
		// first): wait for it, then see that no fifth ever runs.
		Eventually(func() int { return running(macs, a) + running(macs, b) }).Should(Equal(4), "both hosts' slots run")
		Consistently(func() int { return running(macs, a) + running(macs, b) }, "3s").Should(Equal(4), "no host runs more than its slots")
		deleteAndWait(q)
	})

	It("makes the bound claim of a lost host Lost and replaces its idle machine on another host, never moving one", func() {
		const spec = "lost"
		const a, b = "lost-mac-a", "lost-mac-b"
		macs := startMacs(spec, []string{b}, a, b)
		class := vzClass(spec)
		ns := namespace(spec)

		By("a pool of 2 on the first host (the second is cordoned), and a claim bound to one of them")
		p := pool(spec, class, 2)
		awaitIdle(p, 2)
		Expect(perHost(class)).To(Equal(map[string]int{a: 2}))
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dev"},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: class}}
		Expect(admin.Create(ctx, claim)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			ready := meta.FindStatusCondition(claim.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "%s: %s", ready.Reason, ready.Message)
		}).Should(Succeed(), "the claim is Ready: its Mac's guest heartbeats through the operator's endpoint")

		By("the pool's new idle machine waits for the full host, and takes the second once it is uncordoned")
		Eventually(func() map[string]int { return perHost(class) }).Should(Equal(map[string]int{a: 2, "": 1}))
		h := &macvirtv1alpha1.MacHost{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: b}, h)).To(Succeed())
		before := h.DeepCopy()
		h.Spec.Unschedulable = false
		Expect(admin.Patch(ctx, h, client.MergeFrom(before))).To(Succeed())
		Eventually(func() map[string]int { return perHost(class) }).Should(Equal(map[string]int{a: 2, b: 1}))
		var idleOnA string
		for _, m := range machinesOf(class) {
			if m.Spec.HostName == a && m.Spec.ClaimRef == nil {
				idleOnA = m.Name
			}
		}
		Expect(idleOnA).NotTo(BeEmpty())

		By("the first host stops heartbeating")
		macs.Halt(a)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: a}, h)).To(Succeed())
			c := meta.FindStatusCondition(h.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
			g.Expect(c.Reason).To(Equal(macvirtv1alpha1.ReasonHostLost))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			g.Expect(claim.Status.Phase).To(Equal(macvirtv1alpha1.ClaimLost))
		}).Should(Succeed())
		bound := &macvirtv1alpha1.MacMachine{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, bound)).To(Succeed())
		Expect(bound.Status.Phase).To(Equal(macvirtv1alpha1.MachineFailed))
		Expect(readyReason(bound)).To(HavePrefix(macvirtv1alpha1.ReasonHostLost + ": MacHost " + a + " is lost"))
		By("a lost Mac's machine is never moved, not even by an admin")
		unmoved := bound.DeepCopy()
		bound.Spec.HostName = b
		Expect(admin.Patch(ctx, bound, client.MergeFrom(unmoved))).To(MatchError(ContainSubstring("a machine is never moved")))

		By("the pool replaces the lost host's idle machine on the second host")
		Eventually(func(g Gomega) {
			for _, m := range machinesOf(class) {
				g.Expect(m.Name).NotTo(Equal(idleOnA), "the lost idle machine is gone")
			}
			g.Expect(perHost(class)[b]).To(Equal(2))
		}).Should(Succeed())
		Eventually(func() int { return running(macs, b) }).Should(Equal(2))

		By("the host comes back: its agent shuts down the VM no machine is placed for, gracefully, and removes it")
		Expect(admin.Delete(ctx, claim)).To(Succeed())
		Eventually(func() map[string]int { return perHost(class) }).Should(Equal(map[string]int{b: 2}))
		Expect(macs.Start(ctx, a)).To(Succeed())
		Eventually(func() int { return running(macs, a) }).Should(BeZero())
		Eventually(func(g Gomega) {
			cmds, err := build.Commands(macs.Home(a))
			g.Expect(err).NotTo(HaveOccurred())
			deletes := 0
			for _, c := range cmds {
				g.Expect(c).NotTo(HavePrefix("stop"), "tart stop forces a VM off; the agent never uses it")
				if strings.HasPrefix(c, "delete ") {
					deletes++
				}
			}
			g.Expect(deletes).To(Equal(2))
		}).Should(Succeed())
	})

	It("places nothing twice when the operator restarts in the middle of placing a pool", func() {
		const spec = "restart"
		const a, b = "restart-mac-a", "restart-mac-b"
		macs := startMacs(spec, nil, a, b)
		class := vzClass(spec)

		By("a pool of 4, and the operator stopped once the first machine is placed")
		pool(spec, class, 4)
		Eventually(func() int { return len(machinesOf(class)) - perHost(class)[""] }).Should(BeNumerically(">=", 1))
		system.StopOperator()
		Expect(system.StartOperator(ctx, harness.OperatorOptions{})).To(Succeed())

		By("a new operator places the rest: two per host, no host past its slots")
		Eventually(func() map[string]int { return perHost(class) }).Should(Equal(map[string]int{a: 2, b: 2}))
		Eventually(func() int { return running(macs, a) + running(macs, b) }).Should(Equal(4))
		for _, host := range []string{a, b} {
			h := &macvirtv1alpha1.MacHost{}
			Eventually(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKey{Name: host}, h)).To(Succeed())
				g.Expect(h.Status.Machines).To(BeEquivalentTo(2))
			}).Should(Succeed())
		}
		Consistently(func() int { return len(machinesOf(class)) }, "3s").Should(Equal(4))
	})
})

var _ = Describe("Releasing a Mac on an Apple-silicon host", func() {
	It("shuts macOS down from inside, frees the slot, and the next claim gets a fresh Mac on it: five claims in a row on one 2-slot host", func() {
		const spec = "release"
		const a = "release-mac-a"
		macs := startMacs(spec, nil, a)
		class := vzClass(spec)
		ns := namespace(spec)
		// A pool of one idle Mac: each claim binds it, and the pool's new
		// idle Mac needs the host's other slot, which only the claim before
		// it frees.
		p := pool(spec, class, 1)
		awaitIdle(p, 1)
		seen := map[string]bool{}
		for i := range 5 {
			By(fmt.Sprintf("claim %d is Ready on the host's free slot", i+1))
			claim := claimOf(ns, fmt.Sprintf("job-%d", i+1), class)
			awaitReady(claim)
			m := machineOf(claim)
			Expect(m.Spec.HostName).To(Equal(a))
			Expect(m.Status.Host.ImageDigest).To(HavePrefix("sha256:"), "the digest tart made the VM from")
			vm := m.Status.Host.VMName
			Expect(seen).NotTo(HaveKey(vm), "a fresh Mac for every claim")
			seen[vm] = true
			Eventually(func() int { return running(macs, a) }).Should(Equal(2), "the pool's new idle Mac runs in the slot the claim before freed")

			By(fmt.Sprintf("claim %d is released: its macOS shuts down from inside and the VM goes", i+1))
			Expect(admin.Delete(ctx, claim)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(m), &macvirtv1alpha1.MacMachine{}))
			}).Should(BeTrue(), "the machine goes once its VM stopped")
			Expect(build.LastExit(macs.Home(a), vm)).To(BeEmpty(), "the VM's directory is deleted with it")
			Eventually(func() int { return running(macs, a) }).Should(Equal(1), "the slot is free again: only the idle Mac runs")
		}
		cmds, err := build.Commands(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		runs, deletes := 0, 0
		for _, c := range cmds {
			Expect(c).NotTo(HavePrefix("stop"), "tart stop forces a VM off; the agent never uses it")
			switch {
			case strings.HasPrefix(c, "run "):
				runs++
			case strings.HasPrefix(c, "delete "):
				deletes++
			}
		}
		Expect(runs).To(Equal(6), "one run per claim and one for the pool's idle Mac")
		Expect(deletes).To(Equal(5))
		GinkgoWriter.Printf("5 claims, one fresh Mac each, on one 2-slot host: %d runs, %d deletes, no tart stop\n", runs, deletes)
	})
})

var _ = Describe("A Mac whose macOS never shuts down", func() {
	It("is forced off once a deleted machine's grace period passes when its class says PowerOff, and never otherwise", func() {
		const spec = "stubborn"
		const a = "stubborn-mac-a"
		macs := startMacs(spec, nil, a)
		knobs, err := build.ReadKnobs(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		knobs.NeverShutsDown = true
		Expect(build.WriteKnobs(macs.Home(a), knobs)).To(Succeed())
		ns := namespace(spec)
		classOf := func(name string, after macvirtv1alpha1.AfterGracePolicy) string {
			return vzClassOf(name, spec, image, func(s *macvirtv1alpha1.MacClassSpec) {
				s.Lifecycle = macvirtv1alpha1.LifecycleSpec{ShutdownGracePeriod: &metav1.Duration{Duration: 3 * time.Second}, AfterShutdownGracePeriod: after}
			})
		}
		readyClaim := func(name, class string) *macvirtv1alpha1.MacMachine {
			claim := claimOf(ns, name, class)
			awaitReady(claim)
			m := machineOf(claim)
			Expect(admin.Delete(ctx, claim)).To(Succeed())
			return m
		}

		By("a CI class (PowerOff): the released Mac is forced off after its 3s grace, and its slot is free")
		ci := readyClaim("ci", classOf(spec+"-ci", macvirtv1alpha1.AfterGracePowerOff))
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(ci), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue(), "the machine goes once its VM was forced off")
		Eventually(func() int { return running(macs, a) }).Should(BeZero())
		stops := 0
		cmds, err := build.Commands(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		for _, c := range cmds {
			if strings.HasPrefix(c, "stop ") {
				stops++
			}
		}
		Expect(stops).To(Equal(1), "tart stop, once, for the PowerOff class's machine")

		By("a class that waits (the default): the released Mac runs on past its grace, reported, never forced")
		dev := readyClaim("dev", classOf(spec+"-dev", ""))
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(dev), dev)).To(Succeed())
			g.Expect(dev.Status.Host).NotTo(BeNil())
			g.Expect(dev.Status.Host.Error).To(ContainSubstring("never forced"))
		}).Should(Succeed())
		Consistently(func() int { return running(macs, a) }, "3s").Should(Equal(1))
		cmds, err = build.Commands(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		after := 0
		for _, c := range cmds {
			if strings.HasPrefix(c, "stop ") {
				after++
			}
		}
		Expect(after).To(Equal(1), "no tart stop for the waiting class's machine")

		By("its macOS shuts down after all: the machine goes")
		knobs.NeverShutsDown = false
		Expect(build.WriteKnobs(macs.Home(a), knobs)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(dev), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue())
	})
})

var _ = Describe("A 40 GB pull on an Apple-silicon host", func() {
	It("delays no stop and no start of another machine on that Mac, shows its progress, and is given up with its machine", func() {
		const spec = "pull"
		const a = "pull-mac-a"
		// 40 GB over a link that takes ten minutes for it: the spec is over
		// long before the pull would be.
		const big, size, speed = "ghcr.io/cirruslabs/macos-tahoe-xcode:26", int64(40e9), int64(40e9) / 600
		macs := startMacs(spec, nil, a)
		knobs, err := build.ReadKnobs(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		knobs.Images = append(knobs.Images, big)
		knobs.ImageSizes, knobs.PullBytesPerSecond = map[string]int64{big: size}, speed
		Expect(build.WriteKnobs(macs.Home(a), knobs)).To(Succeed())
		ns := namespace(spec)
		small, xcode := vzClassOf(spec+"-small", spec, image, nil), vzClassOf(spec+"-xcode", spec, big, nil)
		// stillPulling checks the pull is under way, short of its end.
		stillPulling := func(m *macvirtv1alpha1.MacMachine) {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			Expect(m.Status.Host).NotTo(BeNil())
			Expect(m.Status.Host.Pull).NotTo(BeNil(), "the pull is still under way")
			Expect(m.Status.Host.Pull.CompletedBytes).To(BeNumerically("<", size))
		}

		By("a first Mac runs on the host")
		first := claimOf(ns, "first", small)
		awaitReady(first)
		firstMachine := machineOf(first)

		By("a Mac of the 40 GB image is placed on the same host; its pull starts, and shows")
		pulling := claimOf(ns, "xcode", xcode)
		pm := machineOf(pulling)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(pm), pm)).To(Succeed())
			g.Expect(pm.Spec.HostName).To(Equal(a))
			g.Expect(pm.Status.Host).NotTo(BeNil())
			g.Expect(pm.Status.Host.Pull).NotTo(BeNil())
			g.Expect(pm.Status.Host.Pull.Image).To(Equal(big))
			g.Expect(pm.Status.Host.Pull.TotalBytes).To(Equal(size), "tart's \"pulling disk (40.0 GB compressed)\"")
			g.Expect(pm.Status.Provisioning).NotTo(BeNil())
			g.Expect(pm.Status.Provisioning.Progress).To(HaveSuffix("%"))
			g.Expect(readyReason(pm)).To(ContainSubstring("is pulling " + big + ": "))
		}).Should(Succeed())

		By("the first Mac is released while the pull goes on: it stops, and its slot is free")
		t0 := time.Now()
		Expect(admin.Delete(ctx, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(firstMachine), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue(), "the released machine goes while the other pulls")
		released := time.Since(t0)
		stillPulling(pm)

		By("a second Mac of a cached image starts in the freed slot while the pull goes on")
		second := claimOf(ns, "second", small)
		took := awaitReady(second)
		stillPulling(pm)
		Expect(running(macs, a)).To(Equal(1))

		By("the pulling Mac's claim is deleted: the pull is given up, and nothing of it stays")
		t1 := time.Now()
		deleteAndWait(pulling)
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(pm), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue(), "the machine goes once its pull was given up")
		givenUp := time.Since(t1)
		out, err := build.Commands(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Join(out, "\n")).To(ContainSubstring("clone " + big))
		vms, err := macs.VMs(ctx, a)
		Expect(err).NotTo(HaveOccurred())
		Expect(vms).To(HaveLen(1), "only the second Mac's VM: the cancelled pull left none")
		GinkgoWriter.Printf("during a 40 GB pull (600s at %d MB/s) on the same host: a release took %s, a start of a cached image %s; "+
			"the pull was given up %s after its claim's deletion\n",
			speed/1e6, released.Round(time.Millisecond), took.Round(time.Millisecond), givenUp.Round(time.Millisecond))
	})
})

var _ = Describe("GitHub Actions jobs on Apple-silicon hosts", func() {
	It("runs 10 jobs one per fresh Mac on 2 hosts of 2 slots, and frees each job's slot", func() {
		const spec = "gha"
		a, b := "gha-mac-a", "gha-mac-b"
		macs := startMacs(spec, nil, a, b)
		class := vzClass(spec)
		ns := namespace(spec)
		Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"},
			StringData: map[string]string{"token": githubToken}})).To(Succeed())
		// The operator runs as its service account here: a team lets it read
		// the namespace's Secrets, as docs/github-actions.md says.
		Expect(world.LetOperatorReadSecrets(ns)).To(Succeed())
		gh := world.GitHub
		set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mac-arm"},
			Spec: macvirtv1alpha1.MacRunnerSetSpec{
				GitHub:    macvirtv1alpha1.GitHubRunnerTarget{URL: gh.URL() + "/acme", CredentialsSecretName: "github"},
				ClassName: class, MaxRunners: 4, MinIdle: 2,
				JobTimeout:          &metav1.Duration{Duration: 10 * time.Minute},
				RegistrationTimeout: &metav1.Duration{Duration: 2 * time.Minute},
			}}
		Expect(admin.Create(ctx, set)).To(Succeed())
		DeferCleanup(func() { deleteAndWait(set) })

		By("10 jobs are queued at once")
		t0 := time.Now()
		ids := make([]string, 0, 10)
		for i := range 10 {
			ids = append(ids, gh.QueueJob(fakegithub.Job{Owner: "acme", Repo: "ios-app", Labels: []string{"mac-arm"},
				DisplayName: fmt.Sprintf("build-%d", i+1), Duration: 2 * time.Second}))
		}
		peak := 0
		Eventually(func(g Gomega) {
			peak = max(peak, running(macs, a)+running(macs, b))
			for _, id := range ids {
				j, ok := gh.Job(id)
				g.Expect(ok).To(BeTrue())
				g.Expect(j.State).To(Equal(fakegithub.JobCompleted), "job %s (%s)", j.ID, j.DisplayName)
			}
		}).WithTimeout(8 * time.Minute).Should(Succeed())
		took := time.Since(t0)

		By("each ran on a Mac of its own, and no Mac ran two")
		runners := map[string]string{}
		var waits []time.Duration
		for _, id := range ids {
			j, _ := gh.Job(id)
			Expect(j.Result).To(Equal("succeeded"), "job %s", j.ID)
			Expect(j.RunnerName).NotTo(BeEmpty())
			Expect(runners).NotTo(HaveKey(j.RunnerName), "runner %s ran jobs %s and %s", j.RunnerName, runners[j.RunnerName], j.ID)
			runners[j.RunnerName] = j.ID
			if !j.RunnerAssignTime.IsZero() && !j.ScaleSetAssignTime.IsZero() {
				waits = append(waits, j.RunnerAssignTime.Sub(j.ScaleSetAssignTime))
			}
		}
		for name, n := range gh.RunnerJobCounts() {
			Expect(n).To(BeNumerically("<=", 1), "runner %s ran %d jobs", name, n)
		}
		Expect(peak).To(BeNumerically("<=", 4), "never more VMs than the 2×2 slots")

		By("every job's Mac is gone and its slot free: only the set's idle Macs run")
		Eventually(func(g Gomega) {
			busy := 0
			for _, m := range machinesOf(class) {
				if m.Spec.ClaimRef != nil {
					busy++
				}
			}
			g.Expect(busy).To(BeZero(), "no Mac is bound once the jobs are done")
			g.Expect(running(macs, a)+running(macs, b)).To(Equal(len(machinesOf(class))), "each VM that runs is a machine's")
		}).Should(Succeed())
		runs := 0
		for _, h := range []string{a, b} {
			cmds, err := build.Commands(macs.Home(h))
			Expect(err).NotTo(HaveOccurred())
			for _, c := range cmds {
				Expect(c).NotTo(HavePrefix("stop"), "no VM was forced off")
				if strings.HasPrefix(c, "run ") {
					runs++
				}
			}
		}
		Expect(runs).To(BeNumerically(">=", 10), "a VM started for each job at least")
		Expect(waits).To(HaveLen(10), "GitHub recorded each job's assignment to the scale set and to its runner")
		slices.Sort(waits)
		GinkgoWriter.Printf("10 GitHub jobs on 2 Apple-silicon hosts of 2 slots: all done in %s, %d VMs started, at most %d at once; "+
			"wait from queued to a runner: p50 %s max %s\n", took.Round(time.Second), runs, peak,
			waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	})
})

var _ = Describe("An image the registry does not have", func() {
	It("leaves its machine Provisioning with tart's own words, retried, while another Mac starts on that host, and goes with its claim", func() {
		const spec = "refused"
		const a = "refused-mac-a"
		macs := startMacs(spec, nil, a)
		ns := namespace(spec)
		missing := "ghcr.io/cirruslabs/macos-nosuch:latest"
		bad, good := vzClassOf(spec+"-bad", spec, missing, nil), vzClassOf(spec+"-good", spec, image, nil)

		By("the pull is refused: the machine says so, with tart's words, on its Ready condition and its claim's")
		claim := claimOf(ns, "bad", bad)
		m := machineOf(claim)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
			g.Expect(m.Status.Phase).To(Equal(macvirtv1alpha1.MachineProvisioning))
			r := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(macvirtv1alpha1.ReasonHostVMFailed))
			g.Expect(r.Message).To(ContainSubstring(`"pulling manifest", code: 404`))
			g.Expect(r.Message).To(ContainSubstring("MANIFEST_UNKNOWN"))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			r := meta.FindStatusCondition(claim.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(r.Message).To(ContainSubstring("MANIFEST_UNKNOWN"), "the tenant reads why")
		}).Should(Succeed())

		By("it is tried again, and the host is not wedged: a Mac of a good image starts there meanwhile")
		other := claimOf(ns, "good", good)
		awaitReady(other)
		Expect(machineOf(other).Spec.HostName).To(Equal(a))
		Eventually(func() (int, error) {
			cmds, err := build.Commands(macs.Home(a))
			n := 0
			for _, c := range cmds {
				if strings.HasPrefix(c, "clone "+missing) {
					n++
				}
			}
			return n, err
		}, "40s").Should(BeNumerically(">=", 2), "a refused creation is retried")

		By("its claim deleted, the machine goes: there was no VM to stop")
		Expect(admin.Delete(ctx, claim)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(m), &macvirtv1alpha1.MacMachine{}))
		}).Should(BeTrue())
		vms, err := macs.VMs(ctx, a)
		Expect(err).NotTo(HaveOccurred())
		Expect(vms).To(HaveLen(1), "only the good claim's VM is on the Mac")
	})
})

var _ = Describe("A tag pushed again, of a Virtualization class with image.refresh", func() {
	It("is pulled again on the class's schedule, and the pool's idle Mac is replaced by one of the new digest; a bound Mac is never touched", func() {
		const spec = "refresh"
		a, b := "refresh-mac-a", "refresh-mac-b"
		macs := startMacs(spec, nil, a, b)
		class := vzClassOf(spec, spec, image, func(s *macvirtv1alpha1.MacClassSpec) {
			s.Tenancy.OnDemand = ptr.To(false)
			s.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "* * * * *"}
		})
		ns := namespace(spec)
		// Room for the roll's surge beside the bound Mac (the default is
		// twice idle).
		p := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: spec},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class, Idle: ptr.To[int32](1), MaxMachines: ptr.To[int32](3)}}
		Expect(admin.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { deleteAndWait(p) })

		By("a bound Mac and an idle one, both of the image's first digest")
		awaitIdle(p, 1)
		bound := claimOf(ns, "kept", class)
		awaitReady(bound)
		kept := machineOf(bound)
		first := kept.Status.Host.ImageDigest
		Expect(first).To(HavePrefix("sha256:"))
		var idle *macvirtv1alpha1.MacMachine
		Eventually(func(g Gomega) {
			idle = nil
			for _, m := range machinesOf(class) {
				if m.Spec.ClaimRef == nil && m.Status.Phase == macvirtv1alpha1.MachineReady {
					idle = m.DeepCopy()
				}
			}
			g.Expect(idle).NotTo(BeNil())
			g.Expect(idle.Status.Host.ImageDigest).To(Equal(first))
		}).Should(Succeed())

		By("the tag is pushed again: the hosts pull it on the next minute, and the idle Mac is rolled")
		second := "sha256:" + strings.Repeat("2", 64)
		for _, h := range []string{a, b} {
			knobs, err := build.ReadKnobs(macs.Home(h))
			Expect(err).NotTo(HaveOccurred())
			knobs.Digests = map[string]string{image: second}
			Expect(build.WriteKnobs(macs.Home(h), knobs)).To(Succeed())
		}
		pushed := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(kept), kept)).To(Succeed())
			g.Expect(kept.Status.Host.LatestImageDigest).To(Equal(second), "the host's cache holds the new digest")
			g.Expect(apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(idle), &macvirtv1alpha1.MacMachine{}))).To(BeTrue(),
				"the idle Mac of the old digest is replaced")
			n := 0
			for _, m := range machinesOf(class) {
				if m.Spec.ClaimRef == nil && m.Status.Phase == macvirtv1alpha1.MachineReady {
					g.Expect(m.Status.Host.ImageDigest).To(Equal(second))
					n++
				}
			}
			g.Expect(n).To(Equal(1), "one idle Mac, of the new digest")
		}, 3*time.Minute).Should(Succeed())
		rolled := time.Since(pushed)
		Expect(kept.Status.Host.ImageDigest).To(Equal(first), "the bound Mac keeps the VM it was given")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(bound), bound)).To(Succeed())
		Expect(bound.Status.MachineRef.Name).To(Equal(kept.Name))
		pulls := 0
		for _, h := range []string{a, b} {
			cmds, err := build.Commands(macs.Home(h))
			Expect(err).NotTo(HaveOccurred())
			for _, c := range cmds {
				if c == "pull "+image {
					pulls++
				}
			}
		}
		Expect(pulls).To(BeNumerically(">=", 1), "tart pull, on schedule")
		GinkgoWriter.Printf("a re-pushed tag: pulled on schedule and the pool's idle Mac rolled %s after the push\n", rolled.Round(time.Second))

		By("the registry loses the tag: the next refresh fails, and the Mac says so in tart's words")
		knobs, err := build.ReadKnobs(macs.Home(a))
		Expect(err).NotTo(HaveOccurred())
		knobs.Images = nil
		Expect(build.WriteKnobs(macs.Home(a), knobs)).To(Succeed())
		Eventually(func(g Gomega) {
			h := &macvirtv1alpha1.MacHost{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: a}, h)).To(Succeed())
			g.Expect(h.Status.Agent).NotTo(BeNil())
			c := meta.FindStatusCondition(h.Status.Agent.Conditions, macvirtv1alpha1.HostConditionImageRefreshFailed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("MANIFEST_UNKNOWN"))
		}, 3*time.Minute).Should(Succeed())
	})
})
