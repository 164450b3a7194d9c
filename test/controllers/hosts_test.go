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

package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// useNodes registers n Apple-hardware nodes for the spec and has the
// simulator schedule every instance onto registered Nodes, by their macOS
// slots, until the spec ends; then the nodes go and instances land
// anywhere again.
func useNodes(n int) []string {
	suffix := strings.TrimPrefix(newNamespace(), "mm-test-")
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("mac-%s-%d", suffix, i+1)
	}
	Expect(sim.SetNodes(suiteCtx, names...)).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			var list kubevirtv1.VirtualMachineInstanceList
			_ = k8sClient.List(context.Background(), &list)
			for _, v := range list.Items {
				GinkgoWriter.Printf("after the failure: VMI %s/%s phase=%s node=%s conds=%+v res=%+v\n", v.Namespace, v.Name, v.Status.Phase, v.Status.NodeName, v.Status.Conditions, v.Spec.Domain.Resources)
			}
			var nodes corev1.NodeList
			_ = k8sClient.List(context.Background(), &nodes)
			for _, n := range nodes.Items {
				GinkgoWriter.Printf("after the failure: node %s alloc=%v taints=%v labels=%v\n", n.Name, n.Status.Allocatable, n.Spec.Taints, n.Labels)
			}
		}
		Expect(sim.SetNodes(suiteCtx)).To(Succeed())
		for _, name := range names {
			_ = k8sClient.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
	return names
}

// slotsOf reads what the node advertises: "capacity/allocatable" of
// macvirt.io/macos-slots, "-" for a missing entry.
func slotsOf(node string) func(Gomega) string {
	return func(g Gomega) string {
		n := &corev1.Node{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: node}, n)).To(Succeed())
		show := func(l corev1.ResourceList) string {
			if q, ok := l[macvirtv1alpha1.ResourceMacOSSlots]; ok {
				return q.String()
			}
			return "-"
		}
		return show(n.Status.Capacity) + "/" + show(n.Status.Allocatable)
	}
}

func annotateNode(node, value string) {
	n := &corev1.Node{}
	Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: node}, n)).To(Succeed())
	patch := client.MergeFrom(n.DeepCopy())
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[macvirtv1alpha1.AnnotationMacOSSlots] = value
	Expect(k8sClient.Patch(context.Background(), n, patch)).To(Succeed())
}

// killWatch records, for the instances and VMs in ns, every instance that
// ended Failed (macOS killed, not shut down) and every VM deleted while its
// instance still existed, until the spec ends.
func killWatch(ns string) func() []string {
	var mu sync.Mutex
	var seen []string
	record := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, list := range []client.ObjectList{&kubevirtv1.VirtualMachineInstanceList{}, &kubevirtv1.VirtualMachineList{}} {
		w, err := watchClient().Watch(ctx, list, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					switch o := ev.Object.(type) {
					case *kubevirtv1.VirtualMachineInstance:
						if o.Status.Phase == kubevirtv1.Failed {
							record("instance " + o.Name + " ended Failed")
						}
					case *kubevirtv1.VirtualMachine:
						if ev.Type != watch.Deleted {
							continue
						}
						err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(o), &kubevirtv1.VirtualMachineInstance{})
						if !apierrors.IsNotFound(err) {
							record("VM " + o.Name + " deleted while its instance existed")
						}
					}
				}
			}
		}()
	}
	DeferCleanup(func() { cancel(); wg.Wait() })
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func instanceOf(ns, name string) func(Gomega) *kubevirtv1.VirtualMachineInstance {
	return func(g Gomega) *kubevirtv1.VirtualMachineInstance {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, vmi)).To(Succeed())
		return vmi
	}
}

// drain runs one pass of kubectl drain over node.
func drain(node string) func(Gomega) simulator.DrainResult {
	return func(g Gomega) simulator.DrainResult {
		res, err := sim.Drain(suiteCtx, node)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Evicted).To(BeEmpty(), "no virt-launcher pod is evicted: macOS would die with it")
		return res
	}
}

var _ = Describe("An Apple node", func() {
	It("advertises two macOS slots, or its own number, and gets them back after kubelet restarts and re-registration", func() {
		node := useNodes(1)[0]
		onlyNodes := func(o *operator.Options) { o.Controllers = []operator.Controller{operator.NodeController} }
		stop := startOperator(onlyNodes)
		Eventually(slotsOf(node)).Should(Equal("2/2"), "the licence's two, in capacity and allocatable")

		By("an admin who knows better sets one")
		annotateNode(node, "1")
		Eventually(slotsOf(node)).Should(Equal("1/1"))

		By("a kubelet restart with its device-manager checkpoint keeps them")
		Expect(sim.RestartKubelet(suiteCtx, node, false)).To(Succeed())
		Expect(slotsOf(node)(Default)).To(Equal("1/1"))

		By("with the operator away, a kubelet that lost its checkpoint zeroes them")
		stop()
		Expect(sim.RestartKubelet(suiteCtx, node, true)).To(Succeed())
		Expect(slotsOf(node)(Default)).To(Equal("0/0"))
		stop = startOperator(onlyNodes)
		Eventually(slotsOf(node)).Should(Equal("1/1"), "put back by the restarted operator")

		By("while the operator runs, the same restart is undone at once")
		Expect(sim.RestartKubelet(suiteCtx, node, true)).To(Succeed())
		Eventually(slotsOf(node)).Should(Equal("1/1"))

		By("a Node deleted and registered again carries only what its kubelet writes, and gets the default")
		Expect(sim.ReregisterNode(suiteCtx, node)).To(Succeed())
		Eventually(slotsOf(node)).Should(Equal("2/2"))

		By("an invalid setting is said on the node, and the default advertised")
		annotateNode(node, "1")
		Eventually(slotsOf(node)).Should(Equal("1/1"))
		annotateNode(node, "lots")
		Eventually(warningsAbout(node, "InvalidMacOSSlots")).ShouldNot(BeEmpty())
		Expect(warningsAbout(node, "InvalidMacOSSlots")()[0].Note).To(ContainSubstring(`annotation macvirt.io/macos-slots="lots" on node ` + node))
		Eventually(slotsOf(node)).Should(Equal("2/2"))

		By("a node no longer labelled as Apple hardware loses them")
		n := &corev1.Node{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: node}, n)).To(Succeed())
		patch := client.MergeFrom(n.DeepCopy())
		delete(n.Labels, macvirtv1alpha1.LabelAppleHardware)
		Expect(k8sClient.Patch(context.Background(), n, patch)).To(Succeed())
		Eventually(slotsOf(node)).Should(Equal("-/-"))
		stop()
	})

	It("keeps a third machine for a two-slot node waiting, saying so, while two run, and its pool neither creates nor deletes more", func() {
		node := useNodes(1)[0]
		DeferCleanup(startOperator())
		class := newClass()
		pool, ns := newPool(class.Name, 3, 6) // room under the cap: only the pool's judgement keeps it at three
		startGuests(ns)
		killed := killWatch(ns)
		w, err := watchClient().Watch(context.Background(), &macvirtv1alpha1.MacMachineList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()

		Eventually(poolStatus(pool.Name)).Should(And(HaveField("Idle", int32(2)), HaveField("Provisioning", int32(1))))
		Eventually(func() metav1.Condition { return poolCondition(pool.Name, macvirtv1alpha1.ConditionReady) }).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonMacOSSlotsExhausted),
			HaveField("Message", ContainSubstring("1 machine(s) cannot be scheduled")),
			HaveField("Message", ContainSubstring("free slots per node: "+node+" 0 of 2 free"))))
		var waiting macvirtv1alpha1.MacMachine
		for _, m := range machinesIn(ns) {
			if c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); c.Reason == macvirtv1alpha1.ReasonMacOSSlotsExhausted {
				waiting = m
			}
		}
		Expect(waiting.Name).NotTo(BeEmpty())
		Expect(waiting.Status.Phase).To(Equal(macvirtv1alpha1.MachineStarting))
		Expect(meta.FindStatusCondition(waiting.Status.Conditions, macvirtv1alpha1.ConditionReady).Message).To(And(
			ContainSubstring("no Apple node it may run on has a free macOS slot"),
			ContainSubstring("0/1 nodes are available: 1 Insufficient macvirt.io/macos-slots.")))
		vmi := instanceOf(ns, waiting.Name)(Default)
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling), "its virt-launcher pod stays Pending")
		Expect(vmi.Status.NodeName).To(BeEmpty())

		By("for a while nothing is created or deleted, and no stall is declared")
		added, deleted := countEvents(w, 4*time.Second)
		Expect(added).To(Equal(3), "the three machines the pool asked for, listed once")
		Expect(deleted).To(BeZero())
		Expect(poolCondition(pool.Name, macvirtv1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionFalse))

		By("a third slot lets it run")
		annotateNode(node, "3")
		Eventually(poolStatus(pool.Name)).Should(HaveField("Idle", int32(3)))
		Eventually(func() metav1.Condition { return poolCondition(pool.Name, macvirtv1alpha1.ConditionReady) }).Should(
			HaveField("Status", metav1.ConditionTrue))
		Expect(killed()).To(BeEmpty())
	})
})

var _ = Describe("An Apple node's running macOS VMs", func() {
	It("keep their slots when the count is lowered under them, and a VM from an older operator is counted and updated without a restart", func() {
		node := useNodes(1)[0]
		stop := startOperator()
		class := newClass()
		ns := newNamespace()
		startGuests(ns)
		m := newMachine(ns, class.Name)
		k := key(m)
		Eventually(phase(k)).Should(Equal(macvirtv1alpha1.MachineReady))
		Eventually(slotsOf(node)).Should(Equal("2/2"))

		By("an admin lowers the count to 0 under a running VM: 1 stays advertised, so a kubelet restart cannot reject it")
		annotateNode(node, "0")
		Eventually(warningsAbout(node, "MacOSSlotsAdjusted")).Should(ContainElement(HaveField("Note",
			ContainSubstring("runs 1 macOS VMs that hold a slot, more than the 0 it should advertise: advertising 1"))))
		Consistently(slotsOf(node)).WithTimeout(time.Second).Should(Equal("1/1"))

		By("an upgrade from an operator whose VMs had no slot request and no evictionStrategy")
		annotateNode(node, "2")
		Eventually(slotsOf(node)).Should(Equal("2/2"))
		stop()
		vm := vmOf(k)()
		patch := client.MergeFrom(vm.DeepCopy())
		spec := &vm.Spec.Template.Spec
		delete(spec.Domain.Resources.Requests, macvirtv1alpha1.ResourceMacOSSlots)
		delete(spec.Domain.Resources.Limits, macvirtv1alpha1.ResourceMacOSSlots)
		spec.EvictionStrategy = nil
		Expect(k8sClient.Patch(context.Background(), vm, patch)).To(Succeed())
		// virt-api lets nobody but KubeVirt change a running instance's
		// spec: the old operator's instance is started from the old
		// template.
		old := instanceOf(ns, vm.Name)(Default)
		Expect(k8sClient.Delete(context.Background(), old)).To(Succeed())
		var uid types.UID
		Eventually(func(g Gomega) {
			vmi := instanceOf(ns, vm.Name)(g)
			g.Expect(vmi.UID).NotTo(Equal(old.UID))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
			g.Expect(vmi.Spec.Domain.Resources.Requests).NotTo(HaveKey(corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)))
			uid = vmi.UID
		}).Should(Succeed())
		DeferCleanup(startOperator())
		Eventually(slotsOf(node)).Should(Equal("1/1"), "its running instance holds a licence the scheduler does not count")
		Eventually(warningsAbout(node, "MacOSSlotsAdjusted")).Should(ContainElement(HaveField("Note",
			ContainSubstring("runs 1 macOS VMs started before VMs requested a slot: advertising 1 of its 2 slots"))))
		Eventually(func(g Gomega) {
			t := vmOf(k)().Spec.Template.Spec
			g.Expect(t.Domain.Resources.Requests).To(HaveKey(corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)))
			g.Expect(t.Domain.Resources.Limits).To(HaveKey(corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)))
			g.Expect(t.EvictionStrategy).To(HaveValue(Equal(kubevirtv1.EvictionStrategyExternal)))
		}).Should(Succeed())
		Expect(instanceOf(ns, vm.Name)(Default).UID).To(Equal(uid), "not restarted for it")
		Eventually(phase(k)).Should(Equal(macvirtv1alpha1.MachineReady), "the guest started from the old template heartbeats")
	})
})

var _ = Describe("Draining an Apple node", func() {
	It("replaces idle machines elsewhere and keeps a bound one for its tenant until the claim lets go, killing none, across an operator restart", func() {
		nodes := useNodes(2)
		drained, spare := nodes[0], nodes[1]
		annotateNode(spare, "0") // everything starts on the node to drain
		stop := startOperator()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.DrainGracePeriod = &metav1.Duration{Duration: time.Hour}
		})
		pool, ns := newPool(class.Name, 1, 3)
		startGuests(ns)
		killed := killWatch(ns)
		tenant := newNamespace()
		ck := key(newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimPhase(ck)).Should(Equal(macvirtv1alpha1.ClaimReady))
		bound := getClaim(ck).Status.MachineRef.Name
		Eventually(poolStatus(pool.Name)).Should(And(HaveField("Idle", int32(1)), HaveField("Bound", int32(1))))
		var idle string
		for _, m := range machinesIn(ns) {
			Expect(m.Status.NodeName).To(Equal(drained))
			if m.Name != bound {
				idle = m.Name
			}
		}
		annotateNode(spare, "2")
		Eventually(slotsOf(spare)).Should(Equal("2/2"))

		By("kubectl drain: every eviction refused in KubeVirt's words, each instance marked for evacuation")
		res := drain(drained)(Default)
		Expect(res.Refused).To(ConsistOf(
			ContainSubstring(`admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: Eviction triggered evacuation of VMI "`+ns+"/"+bound+`"`),
			ContainSubstring(`Eviction triggered evacuation of VMI "`+ns+"/"+idle+`"`)))
		Expect(instanceOf(ns, bound)(Default).Status.EvacuationNodeName).To(Equal(drained))

		By("the idle machine is shut down, deleted and replaced on the other node")
		Eventually(func(g Gomega) {
			err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: idle}, &macvirtv1alpha1.MacMachine{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			var onSpare []string
			for _, m := range machinesInWith(g, ns) {
				if m.Name != bound && m.Status.NodeName == spare && m.Status.Phase == macvirtv1alpha1.MachineReady {
					onSpare = append(onSpare, m.Name)
				}
			}
			g.Expect(onSpare).To(HaveLen(1))
		}).Should(Succeed())
		Eventually(poolStatus(pool.Name)).Should(HaveField("Idle", int32(1)))

		By("the bound machine keeps running for its tenant, who is told, as are the events")
		mk := types.NamespacedName{Namespace: ns, Name: bound}
		Eventually(conditionOf(mk, macvirtv1alpha1.ConditionHostDraining)).Should(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", macvirtv1alpha1.ReasonEvacuationRequested), HaveField("Message", ContainSubstring("drainGracePeriod 1h0m0s"))))
		Eventually(claimCondition(ck, macvirtv1alpha1.ConditionHostDraining)).Should(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", ContainSubstring("node "+drained+" is being drained"))))
		Expect(getMachine(mk).Status.Phase).To(Equal(macvirtv1alpha1.MachineReady))
		Expect(claimPhase(ck)()).To(Equal(macvirtv1alpha1.ClaimReady))
		Eventually(warningsAbout(bound, macvirtv1alpha1.ConditionHostDraining)).ShouldNot(BeEmpty())
		Eventually(warningsAbout(ck.Name, macvirtv1alpha1.ConditionHostDraining)).ShouldNot(BeEmpty())
		Eventually(drain(drained)).Should(And(HaveField("Remaining", 1),
			HaveField("Refused", ConsistOf(ContainSubstring("Evacuation in progress: Eviction triggered evacuation of VMI")))))

		By("an operator restart mid-drain keeps the drain's start, so the grace and its deadline are not renewed")
		before := conditionOf(mk, macvirtv1alpha1.ConditionHostDraining)()
		Expect(before.Message).To(ContainSubstring("until " + before.LastTransitionTime.Add(time.Hour).UTC().Format(time.RFC3339)))
		stop()
		clock.Advance(time.Minute) // the restarted operator's now is later than the drain's start
		DeferCleanup(clock.Reset)
		DeferCleanup(startOperator())
		touch(mk)
		Consistently(func(g Gomega) {
			c := meta.FindStatusCondition(getMachineWith(g, mk).Status.Conditions, macvirtv1alpha1.ConditionHostDraining)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.LastTransitionTime).To(Equal(before.LastTransitionTime))
			g.Expect(c.Message).To(Equal(before.Message), "the deadline in the message is the drain's start plus the grace")
			g.Expect(instanceOf(ns, bound)(g).Status.Phase).To(Equal(kubevirtv1.Running))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		By("the tenant lets go: the machine is shut down gracefully and the drain completes")
		Expect(k8sClient.Delete(context.Background(), getClaim(ck))).To(Succeed())
		Eventually(drain(drained)).Should(HaveField("Remaining", 0))
		Eventually(func(g Gomega) {
			err := k8sClient.Get(context.Background(), mk, &macvirtv1alpha1.MacMachine{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).Should(Succeed())
		Expect(killed()).To(BeEmpty())
	})

	It("shuts a bound machine down gracefully once drainGracePeriod is over and starts it again on another node", func() {
		nodes := useNodes(2)
		drained, spare := nodes[0], nodes[1]
		annotateNode(spare, "0")
		DeferCleanup(startOperator())
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.DrainGracePeriod = &metav1.Duration{Duration: 3 * time.Second}
		})
		pool, ns := newPool(class.Name, 1, 2)
		startGuests(ns)
		killed := killWatch(ns)
		ck := key(newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimPhase(ck)).Should(Equal(macvirtv1alpha1.ClaimReady))
		bound := getClaim(ck).Status.MachineRef.Name
		mk := types.NamespacedName{Namespace: ns, Name: bound}
		Expect(getMachine(mk).Status.NodeName).To(Equal(drained))
		first := instanceOf(ns, bound)(Default).UID
		annotateNode(spare, "2")
		Eventually(slotsOf(spare)).Should(Equal("2/2"))

		drain(drained)(Default)
		Eventually(conditionOf(mk, macvirtv1alpha1.ConditionHostDraining)).Should(HaveField("Reason", macvirtv1alpha1.ReasonEvacuationRequested))
		By("after the grace: a graceful stop, said on the machine and the claim")
		Eventually(warningsAbout(bound, macvirtv1alpha1.ConditionHostDraining)).Should(ContainElement(
			HaveField("Note", ContainSubstring("drainGracePeriod (3s) is over"))))
		Eventually(func(g Gomega) {
			vmi := instanceOf(ns, bound)(g)
			g.Expect(vmi.UID).NotTo(Equal(first), "a new instance")
			g.Expect(vmi.Status.NodeName).To(Equal(spare))
		}).Should(Succeed())
		Eventually(claimPhase(ck)).Should(Equal(macvirtv1alpha1.ClaimReady))
		Expect(getClaim(ck).Status.Machine.NodeName).To(Equal(spare))
		Eventually(conditionOf(mk, macvirtv1alpha1.ConditionHostDraining)).Should(HaveField("Type", BeEmpty()), "no longer draining")
		Expect(getClaim(ck).Status.Conditions).NotTo(ContainElement(HaveField("Type", macvirtv1alpha1.ConditionHostDraining)))
		Eventually(drain(drained)).Should(HaveField("Remaining", 0))
		Expect(killed()).To(BeEmpty())
		Expect(k8sClient.Delete(context.Background(), getClaim(ck))).To(Succeed())
	})
})
