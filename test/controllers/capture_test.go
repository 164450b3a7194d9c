package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Admission keeps anyone but the operator from writing a machine's pool
// label, owner references to macvirt objects and claimRef (the tenancy
// suite tries that with the shipped roles); the binding itself must not
// trust them either, so a machine that got them some other way captures
// no claim.
var _ = Describe("A MacMachine made by hand", func() {
	It("captures no claim, whether labelled and owned like a pool's machine or naming the claim in its claimRef", func() {
		DeferCleanup(startOperator())
		class := newClass()
		pool, _ := newPool(class.Name, 0, 2)
		attacker := newNamespace()
		startGuests(attacker)
		decoy := newMachine(attacker, class.Name, func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name}
			m.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(pool, macvirtv1alpha1.GroupVersion.WithKind("MacPool"))}
		})
		Eventually(phase(key(decoy))).Should(Equal(macvirtv1alpha1.MachineReady))

		victim := newNamespace()
		k := key(newClaim(victim, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionReady)).Should(HaveField("Reason", macvirtv1alpha1.ReasonWaitingForMachine))
		claim := getClaim(k)
		By("a machine in a third namespace that names the claim in its claimRef")
		forged := newMachine(attacker, class.Name, func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: victim, Name: claim.Name, UID: claim.UID}
		})
		Consistently(func(g Gomega) {
			c := getClaimWith(g, k)
			g.Expect(c.Status.MachineRef).To(BeNil(), "the claim took a machine made by hand")
			g.Expect(c.Status.Phase).NotTo(Equal(macvirtv1alpha1.ClaimBound))
			g.Expect(getMachineWith(g, key(decoy)).Spec.ClaimRef).To(BeNil(), "the decoy was bound")
			g.Expect(getMachineWith(g, key(forged)).DeletionTimestamp).To(BeNil(), "the forged machine is ignored, not deleted as an orphan")
		}).WithTimeout(5 * time.Second).Should(Succeed())
	})

	It("that an older operator bound to a claim is not the claim's: the claim is Lost and gets no keys through it", func() {
		class := newClass()
		pool, _ := newPool(class.Name, 0, 2)
		attacker, victim := newNamespace(), newNamespace()
		claim := newClaim(victim, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		By("a binding as the label-trusting binder of old made it, written before the operator starts")
		decoy := newMachine(attacker, class.Name, func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name}
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: victim, Name: claim.Name, UID: claim.UID}
		})
		now := metav1.Now()
		claim.Status.Phase, claim.Status.BoundAt = macvirtv1alpha1.ClaimBound, &now
		claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: attacker, Name: decoy.Name, UID: decoy.UID}
		claim.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionBound, Status: metav1.ConditionTrue,
			Reason: macvirtv1alpha1.ReasonBound, Message: "bound", LastTransitionTime: now}}
		Expect(k8sClient.Status().Update(context.Background(), claim)).To(Succeed())

		DeferCleanup(startOperator())
		k := key(claim)
		Eventually(claimPhase(k)).Should(Equal(macvirtv1alpha1.ClaimLost))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionReady)()).To(HaveField("Message", ContainSubstring("was not made for this claim")))
	})
})
