package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

var _ = Describe("MacClass status", func() {
	BeforeEach(func() { DeferCleanup(startOperator()) })

	It("records the revision and names a missing DataSource until it exists", func() {
		ns := newNamespace()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef.Namespace = &ns
			c.Spec.Bootloader.SourceRef.Namespace = &ns
		})
		get := func() macvirtv1alpha1.MacClassStatus {
			c := &macvirtv1alpha1.MacClass{}
			Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: class.Name}, c)).To(Succeed())
			return c.Status
		}
		Eventually(get).WithTimeout(timeout).Should(And(
			HaveField("Revision", HaveLen(10)),
			HaveField("Conditions", ContainElement(And(HaveField("Status", metav1.ConditionFalse),
				HaveField("Message", And(ContainSubstring("DataSource "+ns+"/sonoma"), ContainSubstring("DataSource "+ns+"/opencore")))))),
		))
		goldenImages(ns, "sonoma", "opencore")
		Eventually(get).WithTimeout(timeout).Should(HaveField("Conditions", ContainElement(HaveField("Status", metav1.ConditionTrue))))
	})
})

var _ = Describe("A pool", func() {
	It("adopts an unbound machine labelled for it that nothing controls (orphaned by an earlier pool of its name), so claims bind it", func() {
		DeferCleanup(startOperator())
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 1)
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Idle", int32(1)))
		var list macvirtv1alpha1.MacMachineList
		Expect(k8sClient.List(context.Background(), &list, client.InNamespace(poolNS))).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		m := list.Items[0]
		By("the garbage collector orphans it, as after kubectl delete macpool --cascade=orphan")
		patch := client.MergeFrom(m.DeepCopy())
		m.OwnerReferences = nil
		Expect(k8sClient.Patch(context.Background(), &m, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(metav1.IsControlledBy(getMachineWith(g, key(&m)), pool)).To(BeTrue())
		}).WithTimeout(timeout).Should(Succeed())
		k := key(newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionBound)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(getClaim(k).Status.MachineRef.UID).To(Equal(m.UID), "the adopted machine, not a new one")
	})

	It("with VMs stuck Pending neither storms nor exceeds its cap", func() {
		DeferCleanup(startOperator())
		class := newClass()
		name := "stuck-" + newNamespace()
		ns := newNamespace()
		for i := range 3 {
			f := simulator.Fault{Kind: simulator.Unschedulable, Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i)}
			sim.Inject(f)
			DeferCleanup(sim.Clear, f)
		}
		w, err := watchClient().Watch(context.Background(), &macvirtv1alpha1.MacMachineList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		idle, maxM := int32(2), int32(3)
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class.Name, Namespace: ns, Idle: &idle, MaxMachines: &maxM}}
		Expect(k8sClient.Create(context.Background(), pool)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), pool) })

		Eventually(poolStatus(name)).WithTimeout(timeout).Should(HaveField("Provisioning", int32(2)))
		added, deleted := countEvents(w, 5*time.Second)
		Expect(added).To(Equal(2), "machines created while VMs cannot be scheduled")
		Expect(deleted).To(BeZero())
		Expect(len(machinesIn(ns))).To(BeNumerically("<=", int(maxM)))
		Eventually(conditionOf(types.NamespacedName{Namespace: ns, Name: name + "-0"}, macvirtv1alpha1.ConditionReady)).
			WithTimeout(timeout).Should(HaveField("Reason", macvirtv1alpha1.ReasonUnschedulable))
		Expect(machinesIn(ns)).To(HaveLen(2), "still no machine beyond the two stuck ones")
	})

	It("converges after a crash in the middle of a scale-up, with no duplicates", func() {
		class := newClass()
		var faulty *faultyClient
		stop := startOperator(func(o *operator.Options) {
			o.Controllers = []operator.Controller{operator.PoolController}
			o.WrapClient = func(c client.Client) client.Client {
				faulty = newFaultyClient(c)
				faulty.crashAfter = 1
				// This spec's pool and its machines (named <pool>-<slot>) only.
				faulty.scope = func(o client.Object) bool { return strings.HasPrefix(o.GetName(), "crash-pool-") }
				return faulty
			}
		})
		pool, ns := newPool(class.Name, 3, 5, func(p *macvirtv1alpha1.MacPool) {
			p.GenerateName, p.Spec.MaxProvisioning = "crash-pool-", 3
		})
		Eventually(faulty.crashed).WithTimeout(timeout).Should(BeClosed())
		stop()
		Expect(machinesIn(ns)).To(HaveLen(1), "the crash came after the first create")
		DeferCleanup(startOperator(func(o *operator.Options) { o.Controllers = []operator.Controller{operator.PoolController} }))
		Eventually(func(g Gomega) []string {
			var names []string
			for _, m := range machinesInWith(g, ns) {
				names = append(names, m.Name)
			}
			return names
		}).WithTimeout(timeout).Should(ConsistOf(pool.Name+"-0", pool.Name+"-1", pool.Name+"-2"))
		Consistently(func(g Gomega) int { return len(machinesInWith(g, ns)) }).WithTimeout(time.Second).Should(Equal(3))
	})
})

var _ = Describe("A bind", func() {
	// crashAfterMachineWrite starts a claims-only operator whose first
	// write in the two namespaces (the machine's claimRef) goes through and
	// whose process then "crashes", before the claim's status records it,
	// and returns the claim and the machine.
	crashAfterMachineWrite := func(poolName, claimNS, poolNS string) (*macvirtv1alpha1.MacClaim, string) {
		var faulty *faultyClient
		stop := startOperator(func(o *operator.Options) {
			o.Controllers = []operator.Controller{operator.ClaimController}
			o.WrapClient = func(c client.Client) client.Client {
				faulty = newFaultyClient(c)
				faulty.crashAfter = 1
				faulty.scope = func(o client.Object) bool { return o.GetNamespace() == claimNS || o.GetNamespace() == poolNS }
				return faulty
			}
		})
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = poolName })
		Eventually(faulty.crashed).WithTimeout(timeout).Should(BeClosed())
		stop()
		var bound []string
		for _, m := range machinesIn(poolNS) {
			if m.Spec.ClaimRef != nil {
				Expect(m.Spec.ClaimRef.UID).To(Equal(claim.UID))
				bound = append(bound, m.Name)
			}
		}
		Expect(bound).To(HaveLen(1), "the machine side was written before the crash")
		got := getClaim(key(claim))
		Expect(got.Status.MachineRef).To(BeNil(), "the claim's status was not written")
		return got, bound[0]
	}
	// reserveAsAnOlderOperatorDid leaves the claim's status as an operator
	// before the write budget left it between its reservation and the
	// machine's write: the machine named, Bound=False reason Binding.
	reserveAsAnOlderOperatorDid := func(claim *macvirtv1alpha1.MacClaim, m *macvirtv1alpha1.MacMachine) {
		claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
		claim.Status.Phase = macvirtv1alpha1.ClaimPending
		meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
			Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonBinding, Message: "reserved " + m.Name})
		Expect(k8sClient.Status().Update(context.Background(), claim)).To(Succeed())
	}
	boundName := func(k types.NamespacedName) func(Gomega) string {
		return func(g Gomega) string {
			c := getClaimWith(g, k)
			if c.Status.MachineRef == nil || !meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionBound) {
				return ""
			}
			return c.Status.MachineRef.Name
		}
	}

	It("interrupted between the machine write and the claim's status write is completed with that machine, binding no other", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 5, 5, paused)
		readyIdleMachines(pool, class, 5)
		claimNS := newNamespace()
		claim, bound := crashAfterMachineWrite(pool.Name, claimNS, poolNS)

		DeferCleanup(startOperator(claimsOnly))
		Eventually(boundName(key(claim))).WithTimeout(timeout).Should(Equal(bound))
		expectOneToOne(claim.Namespace, poolNS, 1)
	})

	It("left reserved by an older operator is completed with the reserved machine", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 5, 5, paused)
		readyIdleMachines(pool, class, 5)
		claimNS := newNamespace()
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		reserved := machinesIn(poolNS)[3]
		reserveAsAnOlderOperatorDid(getClaim(key(claim)), &reserved)

		DeferCleanup(startOperator(claimsOnly))
		Eventually(boundName(key(claim))).WithTimeout(timeout).Should(Equal(reserved.Name))
		expectOneToOne(claim.Namespace, poolNS, 1)
	})

	It("left reserved by an older operator, whose machine went to another claim meanwhile, takes another, and burns none", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 2, 2, paused)
		readyIdleMachines(pool, class, 2)
		claimNS := newNamespace()
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		reserved := machinesIn(poolNS)[0]
		reserveAsAnOlderOperatorDid(getClaim(key(claim)), &reserved)

		By("another operator binds the reserved machine to another claim")
		other := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		bound := reserved.DeepCopy()
		bound.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: claimNS, Name: other.Name, UID: other.UID}
		Expect(k8sClient.Update(context.Background(), bound)).To(Succeed())

		var faulty *faultyClient
		DeferCleanup(startOperator(func(o *operator.Options) {
			o.Controllers = []operator.Controller{operator.ClaimController}
			o.WrapClient = func(c client.Client) client.Client { faulty = newFaultyClient(c); return faulty }
		}))
		Eventually(boundName(key(claim))).WithTimeout(timeout).ShouldNot(Or(BeEmpty(), Equal(reserved.Name)))
		expectOneToOne(claim.Namespace, poolNS, 2)
		Expect(faulty.deletesIn(poolNS)).To(BeZero(), "no machine deleted")
	})

	It("written machine side first (an older operator, or a machine made on demand) is adopted, not undone", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 2, 2, paused)
		readyIdleMachines(pool, class, 2)
		claimNS := newNamespace()
		// Created with no operator running; the machine names it first.
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		m := getMachine(types.NamespacedName{Namespace: poolNS, Name: pool.Name + "-1"})
		m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: claimNS, Name: claim.Name, UID: claim.UID}
		Expect(k8sClient.Update(context.Background(), m)).To(Succeed())

		DeferCleanup(startOperator(claimsOnly))
		Eventually(boundName(key(claim))).WithTimeout(timeout).Should(Equal(m.Name))
		expectOneToOne(claim.Namespace, poolNS, 1)
	})
})
