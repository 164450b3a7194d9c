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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

var _ = Describe("A suspended pool on Apple-silicon hosts", func() {
	It("holds no slot while its 6 idle Macs sleep on 2 hosts of 2 slots; 4 claims resume 4, each a new Mac of its own, and releasing them frees the slots", func() {
		const spec = "suspend"
		hosts := []string{"suspend-mac-a", "suspend-mac-b"}
		macs := startMacs(spec, nil, hosts...)
		class := vzClass(spec)
		ns := namespace(spec)
		// Both Macs take machines before the pool makes any, so placement
		// weighs both from the first.
		Eventually(func(g Gomega) {
			for _, h := range hosts {
				host := &macvirtv1alpha1.MacHost{}
				g.Expect(admin.Get(ctx, client.ObjectKey{Name: h}, host)).To(Succeed())
				g.Expect(meta.IsStatusConditionTrue(host.Status.Conditions, macvirtv1alpha1.HostConditionSchedulable)).To(BeTrue(), h)
			}
		}).Should(Succeed())
		p := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: spec},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class, Idle: ptr.To[int32](6), MaxMachines: ptr.To[int32](6),
				IdleState: macvirtv1alpha1.IdleSuspended}}
		Expect(admin.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { deleteAndWait(p) })

		slotsHeld := func() int { return running(macs, hosts[0]) + running(macs, hosts[1]) }
		By("every idle Mac boots once, reports, and is suspended: 6 idle, 6 suspended, no slot held")
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.Idle).To(Equal(int32(6)))
			g.Expect(p.Status.Suspended).To(Equal(int32(6)))
		}).WithTimeout(4 * time.Minute).Should(Succeed())
		Expect(slotsHeld()).To(Equal(0), "suspended Macs hold no licence slot")
		c := meta.FindStatusCondition(p.Status.Conditions, macvirtv1alpha1.ConditionIdleSuspended)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		GinkgoWriter.Printf("pool while idle: idle %d, suspended %d, bound %d, machines %d; slots held %d; %s\n",
			p.Status.Idle, p.Status.Suspended, p.Status.Bound, p.Status.Machines, slotsHeld(), c.Message)
		before := map[string][]string{}
		for _, m := range machinesOf(class) {
			Expect(m.Status.Phase).To(Equal(macvirtv1alpha1.MachineSuspended), readyReason(&m))
			Expect(m.Status.Guest).NotTo(BeNil())
			Expect(m.Status.Guest.SSHHostKeys).NotTo(BeEmpty())
			before[m.Name] = m.Status.Guest.SSHHostKeys
		}
		suspended := int32(0)
		for _, h := range hosts {
			host := &macvirtv1alpha1.MacHost{}
			Expect(admin.Get(ctx, client.ObjectKey{Name: h}, host)).To(Succeed())
			suspended += host.Status.SuspendedMachines
			// Spread (3+3 on a quiet machine; the order of the suspends
			// may make it 4+2), so each Mac has 2 to resume in its slots.
			Expect(host.Status.SuspendedMachines).To(BeNumerically(">=", 2), "suspended Macs are spread, so every Mac has some to resume")
			GinkgoWriter.Printf("MacHost %s: %d machines, %d suspended, %d running VMs\n", h, host.Status.Machines, host.Status.SuspendedMachines,
				host.Status.Agent.RunningVMs)
		}
		Expect(suspended).To(Equal(int32(6)))

		By("4 claims each resume a suspended Mac, 2 per host")
		var claims []*macvirtv1alpha1.MacClaim
		for i := range 4 {
			claims = append(claims, claimOf(ns, fmt.Sprintf("job-%d", i+1), class))
		}
		var took []time.Duration
		for _, claim := range claims {
			took = append(took, awaitReady(claim))
		}
		Expect(slotsHeld()).To(Equal(4))
		keys, hostnames, serials, tokens := map[string]string{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
		perHostBound := map[string]int{}
		for _, claim := range claims {
			m := machineOf(claim)
			Expect(m.Status.Host.ResumedAt).NotTo(BeNil(), "the claim's Mac was resumed, not booted")
			Expect(m.Status.Host.SuspendedAt).NotTo(BeNil())
			perHostBound[m.Spec.HostName]++
			for _, k := range m.Status.Guest.SSHHostKeys {
				Expect(before[m.Name]).NotTo(ContainElement(k), "%s reports a host key it had before it was suspended", m.Name)
				Expect(keys).NotTo(HaveKey(k), "%s shares a host key with %s", m.Name, keys[k])
				keys[k] = m.Name
			}
			Expect(hostnames).NotTo(HaveKey(m.Status.Guest.Hostname))
			hostnames[m.Status.Guest.Hostname] = true
			serial := macs.Serial(m.Spec.HostName, m.Status.Host.VMName)
			Expect(serial).NotTo(BeEmpty())
			Expect(serials).NotTo(HaveKey(serial), "two Macs with one serial number")
			serials[serial] = true
			token := m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
			Expect(tokens).NotTo(HaveKey(token))
			tokens[token] = true
		}
		Expect(perHostBound).To(HaveLen(2), "the claims resume Macs where slots are free")
		for _, h := range hosts {
			vms, err := macs.RunningVMs(ctx, h)
			Expect(err).NotTo(HaveOccurred())
			macsOn := map[string]string{}
			for _, vm := range vms {
				Expect(vm.MAC).NotTo(BeEmpty())
				Expect(macsOn).NotTo(HaveKey(vm.MAC), "%s and %s share a MAC address on %s", vm.Name, macsOn[vm.MAC], h)
				macsOn[vm.MAC] = vm.Name
			}
			GinkgoWriter.Printf("MacHost %s runs %d resumed Macs with MACs %v\n", h, len(vms), macsOn)
		}
		cmds, err := build.Commands(macs.Home(hosts[0]))
		Expect(err).NotTo(HaveOccurred())
		Expect(slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "suspend ") })).To(BeTrue())
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		GinkgoWriter.Printf("pool with 4 claims: idle %d, suspended %d, bound %d, machines %d; slots held %d; claim to Ready %v\n",
			p.Status.Idle, p.Status.Suspended, p.Status.Bound, p.Status.Machines, slotsHeld(), took)

		By("releasing the claims shuts their Macs down and frees the slots")
		for _, claim := range claims {
			m := machineOf(claim)
			Expect(admin.Delete(ctx, claim)).To(Succeed())
			Eventually(func() bool {
				// The pool makes its replacement under the same name.
				now := &macvirtv1alpha1.MacMachine{}
				err := admin.Get(ctx, client.ObjectKeyFromObject(m), now)
				return apierrors.IsNotFound(err) || (err == nil && now.UID != m.UID)
			}).Should(BeTrue(), "the machine goes once its VM stopped")
		}
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.Suspended).To(Equal(int32(6)), "the pool makes and suspends 4 new Macs")
			g.Expect(slotsHeld()).To(Equal(0))
		}).WithTimeout(4 * time.Minute).Should(Succeed())
		GinkgoWriter.Printf("pool after release: idle %d, suspended %d, bound %d, machines %d; slots held %d\n",
			p.Status.Idle, p.Status.Suspended, p.Status.Bound, p.Status.Machines, slotsHeld())
	})
})
