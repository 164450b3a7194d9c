package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("Pools and claims", func() {
	BeforeEach(func() { DeferCleanup(startOperator()) })

	It("keep warm machines, bind a claim to one, make it Ready, write the connection Secret it asks for, and refill", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 2, 4)
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(
			HaveField("Idle", int32(2)), HaveField("Conditions", ContainElement(HaveField("Status", metav1.ConditionTrue)))))

		tenant := newNamespace()
		claim := newClaim(tenant, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.PoolName = pool.Name
			c.Spec.WriteConnectionSecretToRef = &macvirtv1alpha1.LocalSecretReference{Name: "ssh"}
		})
		k := key(claim)
		Eventually(claimPhase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		c := getClaim(k)
		Expect(c.Status.MachineRef.Namespace).To(Equal(poolNS))
		// The address is the virt-launcher pod's, as KubeVirt reports it;
		// never the one the guest sees behind masquerade (10.0.2.2), which
		// the guests here report, as real ones do.
		podIP := launcherPodIP(poolNS, c.Status.MachineRef.Name)
		host := claim.Name + ".macs." + tenant + ".svc"
		Expect(c.Status.Connection).To(Equal(&macvirtv1alpha1.ClaimConnection{Host: host, ServiceName: "macs", Address: podIP,
			SSHPort: 22, User: "admin", HostKeys: []string{testHostKey}}))
		Expect(c.Status.BoundAt).NotTo(BeNil())
		By("the connection Secret it asked for follows Ready")
		Eventually(func(g Gomega) string { return getClaimWith(g, k).Status.ConnectionSecretName }).WithTimeout(timeout).Should(Equal("ssh"))
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: tenant, Name: "ssh"}, secret)).To(Succeed())
		Expect(secret.Data).To(And(HaveKeyWithValue("host", []byte(host)), Not(HaveKey("address")),
			HaveKeyWithValue("port", []byte("22")), HaveKeyWithValue("user", []byte("admin")),
			HaveKeyWithValue("known_hosts", []byte(host+" "+testHostKey+"\n"))), "what lasts as long as the binding: not the pod address")
		Expect(secret.OwnerReferences).To(ConsistOf(HaveField("UID", claim.UID)))
		Expect(secret.Immutable).To(HaveValue(BeTrue()))

		m := getMachine(types.NamespacedName{Namespace: poolNS, Name: c.Status.MachineRef.Name})
		Expect(m.Spec.ClaimRef.UID).To(Equal(claim.UID))
		Expect(m.OwnerReferences).To(BeEmpty(), "a bound machine is no longer owned by its pool")

		By("refilling the pool behind the claim")
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(2)), HaveField("Bound", int32(1))))

		By("releasing with reclaimPolicy Delete: the machine is stopped gracefully and deleted")
		Expect(k8sClient.Delete(context.Background(), c)).To(Succeed())
		mk := key(m)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), mk, &macvirtv1alpha1.MacMachine{}))
		}).WithTimeout(timeout).Should(BeTrue())
		Expect(stopRequestsFor(mk)).To(HaveLen(1))
	})

	It("refill behind a bind when maxMachines is unset: the cap is twice idle", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 0, func(p *macvirtv1alpha1.MacPool) { p.Spec.MaxMachines = nil })
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(
			HaveField("Idle", int32(1)), HaveField("MaxMachines", int32(2))))

		claim := newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(
			HaveField("Idle", int32(1)), HaveField("Bound", int32(1)), HaveField("Machines", int32(2))),
			"a pool that only says how many to keep warm keeps them warm after a bind")
	})

	It("keep a Retained machine, released, stopped gracefully with its disks, and outside the pool's cap", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 1)
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Idle", int32(1)))
		claim := newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.ClassName = class.Name
			c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain
		})
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		mk := types.NamespacedName{Namespace: poolNS, Name: getClaim(key(claim)).Status.MachineRef.Name}
		Expect(k8sClient.Delete(context.Background(), claim)).To(Succeed())
		Eventually(func(g Gomega) map[string]string { return getMachineWith(g, mk).Labels }).WithTimeout(timeout).
			Should(HaveKeyWithValue(macvirtv1alpha1.LabelReleased, "true"))
		Eventually(phase(mk)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineStopped))
		Expect(stopRequestsFor(mk)).To(HaveLen(1), "stopped through the stop subresource, gracefully")
		Expect(ownedBy(mk)(Default)).To(HaveField("DataVolumes", 2), "disks kept")
		Expect(getMachine(mk).DeletionTimestamp.IsZero()).To(BeTrue())
		By("the released machine is counted apart, and the pool refills even at maxMachines 1")
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(1)), HaveField("Bound", int32(0)),
			HaveField("Released", int32(1)), HaveField("Machines", int32(1))))
	})

	It("keep a Retain claim waiting where the class forbids Retain or its namespace holds too many released machines", func() {
		forbid, allow := false, true
		strict := newClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.AllowRetain = &forbid })
		ns := newNamespace()
		refused := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.ClassName, c.Spec.ReclaimPolicy = strict.Name, macvirtv1alpha1.ReclaimRetain
		})
		Eventually(claimCondition(key(refused), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonRetainNotAllowed), HaveField("Message", ContainSubstring("allowRetain"))))

		one := int32(1)
		bounded := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.AllowRetain, c.Spec.Tenancy.MaxReleasedPerNamespace = &allow, &one
		})
		first := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.ClassName, c.Spec.ReclaimPolicy = bounded.Name, macvirtv1alpha1.ReclaimRetain
		})
		Eventually(claimPhase(key(first))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimBound))
		mk := types.NamespacedName{Namespace: ns, Name: getClaim(key(first)).Status.MachineRef.Name}
		Expect(k8sClient.Delete(context.Background(), first)).To(Succeed())
		Eventually(func(g Gomega) map[string]string { return getMachineWith(g, mk).Labels }).WithTimeout(timeout).
			Should(HaveKeyWithValue(macvirtv1alpha1.LabelReleased, "true"))
		second := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.ClassName, c.Spec.ReclaimPolicy = bounded.Name, macvirtv1alpha1.ReclaimRetain
		})
		Eventually(claimCondition(key(second), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonTooManyReleased), HaveField("Message", ContainSubstring("maxReleasedPerNamespace"))))

		By("deleting the released machine makes room")
		Expect(k8sClient.Delete(context.Background(), getMachine(mk))).To(Succeed())
		Eventually(claimPhase(key(second))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimBound))
	})

	It("keep a burst of Retain claims within maxReleasedPerNamespace though the cache lags their binds", func() {
		allow, one := true, int32(1)
		bounded := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.AllowRetain, c.Spec.Tenancy.MaxReleasedPerNamespace = &allow, &one
		})
		ns := newNamespace()
		var burst []types.NamespacedName
		for range 6 {
			burst = append(burst, key(newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
				c.Spec.ClassName, c.Spec.ReclaimPolicy = bounded.Name, macvirtv1alpha1.ReclaimRetain
			})))
		}
		phases := func(g Gomega) map[macvirtv1alpha1.ClaimPhase]int {
			out := map[macvirtv1alpha1.ClaimPhase]int{}
			for _, k := range burst {
				out[getClaimWith(g, k).Status.Phase]++
			}
			return out
		}
		Eventually(phases).WithTimeout(timeout).Should(And(HaveKeyWithValue(macvirtv1alpha1.ClaimPending, 5), Not(HaveKey(macvirtv1alpha1.ClaimPhase("")))))
		Consistently(func(g Gomega) []macvirtv1alpha1.MacMachine { return machinesInWith(g, ns) }).WithTimeout(2 * time.Second).Should(HaveLen(1))
	})

	It("create a pre-bound machine in the claim's namespace when no pool has one idle", func() {
		class := newClass()
		ns := newNamespace()
		startGuests(ns)
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		ms := machinesIn(ns)
		Expect(ms).To(HaveLen(1))
		Expect(ms[0].Spec.ClaimRef.UID).To(Equal(claim.UID))
		Expect(ms[0].OwnerReferences).To(ConsistOf(HaveField("UID", claim.UID)))
		Expect(k8sClient.Delete(context.Background(), claim)).To(Succeed())
		Eventually(func(g Gomega) []macvirtv1alpha1.MacMachine { return machinesInWith(g, ns) }).WithTimeout(timeout).Should(BeEmpty())
	})

	It("leave a claim from a namespace outside allowedNamespaces unbound, saying why", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ios"}}
		})
		ns := newNamespace()
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", macvirtv1alpha1.ReasonNamespaceNotAllowed),
			HaveField("Message", And(ContainSubstring(class.Name), ContainSubstring("team=ios")))))
		Expect(machinesIn(ns)).To(BeEmpty())

		labelNamespace(ns, map[string]string{"team": "ios"})
		Expect(k8sClient.Delete(context.Background(), claim)).To(Succeed())
		again := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(claimPhase(key(again))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimBound))
	})

	It("never let a claim recreated with the same name inherit the old machine", func() {
		class := newClass()
		ns := newNamespace()
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.GenerateName, c.Name, c.Spec.ClassName = "", "build", class.Name
			c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain
		})
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimBound))
		first := getClaim(key(claim)).Status.MachineRef
		Expect(k8sClient.Delete(context.Background(), claim)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), key(claim), &macvirtv1alpha1.MacClaim{}))
		}).WithTimeout(timeout).Should(BeTrue())
		again := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.GenerateName, c.Name, c.Spec.ClassName = "", "build", class.Name })
		Eventually(claimPhase(key(again))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimBound))
		second := getClaim(key(again)).Status.MachineRef
		Expect(second.UID).NotTo(Equal(first.UID))
		Eventually(func(g Gomega) map[string]string {
			return getMachineWith(g, types.NamespacedName{Namespace: ns, Name: first.Name}).Labels
		}).
			WithTimeout(timeout).Should(HaveKeyWithValue(macvirtv1alpha1.LabelReleased, "true"))
	})

	It("mark a claim Lost when its machine disappears, and never re-bind it", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 2, 4)
		startGuests(poolNS)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(HaveField("Idle", int32(2)))
		claim := newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		ref := getClaim(key(claim)).Status.MachineRef
		Expect(k8sClient.Delete(context.Background(), getMachine(types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}))).To(Succeed())
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(
			HaveField("Reason", macvirtv1alpha1.ReasonMachineLost))
		Expect(claimPhase(key(claim))()).To(Equal(macvirtv1alpha1.ClaimLost))
		Consistently(func(g Gomega) types.UID { return getClaimWith(g, key(claim)).Status.MachineRef.UID }).WithTimeout(time.Second).Should(Equal(ref.UID))
	})
})

var _ = Describe("A claim's lifetime", func() {
	BeforeEach(func() { DeferCleanup(startOperator()) })

	It("ends with a warning first, gives the machine back, and never binds the claim again; the class caps it", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.MaxClaimLifetime = &metav1.Duration{Duration: 2 * time.Hour}
		})
		pool, poolNS := newPool(class.Name, 1, 3)
		startGuests(poolNS)
		claim := newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.PoolName = pool.Name
			c.Spec.Lifetime = &metav1.Duration{Duration: 3 * time.Hour}
		})
		k := key(claim)
		Eventually(claimPhase(k)).Should(Equal(macvirtv1alpha1.ClaimReady))
		c := getClaim(k)
		Expect(c.Status.ExpiresAt).NotTo(BeNil())
		Expect(c.Status.ExpiresAt.Time).To(BeTemporally("==", c.Status.BoundAt.Add(2*time.Hour)), "the class's cap, not the 3h asked")
		machine := types.NamespacedName{Namespace: c.Status.MachineRef.Namespace, Name: c.Status.MachineRef.Name}

		By("a tenth of it before the end (12 minutes), a warning; the Mac is still the tenant's")
		Expect(warningsAbout(claim.Name, "ClaimExpiring")()).To(BeEmpty())
		clock.Advance(2*time.Hour - 11*time.Minute)
		touchObject(getClaim(k))
		Eventually(warningsAbout(claim.Name, "ClaimExpiring")).Should(ContainElement(HaveField("Note",
			ContainSubstring("lifetime ends at "+c.Status.ExpiresAt.UTC().Format(time.RFC3339)))))
		Expect(claimPhase(k)()).NotTo(Equal(macvirtv1alpha1.ClaimExpired))

		By("at the end: Expired, the machine stopped and deleted (reclaimPolicy Delete)")
		clock.Advance(12 * time.Minute)
		touchObject(getClaim(k))
		Eventually(claimPhase(k)).Should(Equal(macvirtv1alpha1.ClaimExpired))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), machine, &macvirtv1alpha1.MacMachine{}))
		}).WithTimeout(time.Minute).Should(BeTrue())
		Expect(warningsAbout(machine.Name, "Released")()).To(BeEmpty(), "Released is a Normal event")

		By("the pool's idle machine is not bound to it")
		Consistently(func(g Gomega) {
			got := getClaimWith(g, k)
			g.Expect(got.Status.Phase).To(Equal(macvirtv1alpha1.ClaimExpired))
			g.Expect(got.Status.MachineRef.Name).To(Equal(machine.Name))
			g.Expect(got.Status.Connection).To(BeNil())
		}).WithTimeout(2 * time.Second).Should(Succeed())
		ready := meta.FindStatusCondition(getClaim(k).Status.Conditions, macvirtv1alpha1.ConditionReady)
		Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonLifetimeExpired))
		Expect(ready.Message).To(ContainSubstring("delete it, and claim again"))
	})
})
