package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// A waiting claim wakes when what it waits for changes, not at the next
// resync (ten hours by default): the operator watches classes, pools and
// namespaces for it.
var _ = Describe("A waiting claim", func() {
	BeforeEach(func() {
		DeferCleanup(startOperator())
	})

	machineRef := func(claim *macvirtv1alpha1.MacClaim) func(Gomega) *macvirtv1alpha1.ObjectRef {
		return func(g Gomega) *macvirtv1alpha1.ObjectRef { return getClaimWith(g, key(claim)).Status.MachineRef }
	}

	It("binds once its class is created after it, as GitOps may apply them", func() {
		ns := newNamespace()
		className := "late-" + ns
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = className })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).
			Should(HaveField("Reason", macvirtv1alpha1.ReasonClassNotFound))

		newClass(func(c *macvirtv1alpha1.MacClass) {
			c.GenerateName, c.Name = "", className
			c.Spec.Tenancy.OnDemand = ptrTo(true)
		})
		Eventually(machineRef(claim)).WithTimeout(timeout).ShouldNot(BeNil(), "the new class wakes the claim")
	})

	It("says it waits for machines once its pool is created after it", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.OnDemand = ptrTo(false) })
		ns := newNamespace()
		poolName := "late-" + ns
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = poolName })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).
			Should(HaveField("Reason", macvirtv1alpha1.ReasonPoolNotFound))

		// No idle machines: no machine event can wake the claim, only the pool.
		newPool(class.Name, 0, 1, func(p *macvirtv1alpha1.MacPool) { p.GenerateName, p.Name = "", poolName })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonWaitingForMachine),
			HaveField("Message", ContainSubstring("pool/"+poolName))), "the new pool wakes the claim")
	})

	It("binds once its namespace is labelled into the class's tenancy", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.OnDemand = ptrTo(true)
			c.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ios"}}
		})
		ns := newNamespace()
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).
			Should(HaveField("Reason", macvirtv1alpha1.ReasonNamespaceNotAllowed))

		labelNamespace(ns, map[string]string{"team": "ios"})
		Eventually(machineRef(claim)).WithTimeout(timeout).ShouldNot(BeNil(), "the namespace's new label wakes the claim")
	})

	It("binds on demand once its class turns onDemand", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.OnDemand = ptrTo(false) })
		ns := newNamespace()
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).
			Should(HaveField("Reason", macvirtv1alpha1.ReasonWaitingForMachine))

		before := class.DeepCopy()
		class.Spec.Tenancy.OnDemand = ptrTo(true)
		Expect(k8sClient.Patch(context.Background(), class, client.MergeFrom(before))).To(Succeed())
		Eventually(machineRef(claim)).WithTimeout(timeout).ShouldNot(BeNil(), "the class's change wakes the claim")
	})
})
