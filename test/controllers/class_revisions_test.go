package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
)

// A machine keeps what it was rendered from: the operator snapshots every
// class revision, and a machine whose class is deleted or changed renders
// and observes from the snapshot of the revision it records.
var _ = Describe("A machine whose class is deleted or changed", func() {
	BeforeEach(func() {
		DeferCleanup(startOperator())
		DeferCleanup(clock.Reset)
	})

	It("keeps serving when its class is deleted: stays Ready with its claim, counts heartbeats, and reports ClassUpToDate=False", func() {
		ctx := context.Background()
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 1)
		var mk types.NamespacedName
		Eventually(func(g Gomega) {
			heartbeatRunning(ctx, poolNS)
			ms := machinesIn(poolNS)
			g.Expect(ms).To(HaveLen(1))
			g.Expect(ms[0].Status.Phase).To(Equal(macvirtv1alpha1.MachineReady))
			mk = key(&ms[0])
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		ck := key(newClaim(newNamespace(), func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name }))
		Eventually(claimPhase(ck)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		rev := getMachine(mk).Spec.ClassRevision
		Expect(rev).NotTo(BeEmpty())

		By("deleting the class")
		Expect(k8sClient.Delete(ctx, class)).To(Succeed())
		Consistently(phase(mk)).WithTimeout(2*time.Second).WithPolling(interval).Should(Equal(macvirtv1alpha1.MachineReady),
			"a machine whose class is deleted keeps serving")
		Eventually(conditionOf(mk, macvirtv1alpha1.ConditionClassUpToDate)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonClassNotFound),
			HaveField("Message", ContainSubstring(rev))))
		Expect(conditionOf(mk, macvirtv1alpha1.ConditionReady)().Status).To(Equal(metav1.ConditionTrue))
		Expect(conditionOf(mk, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionFalse))
		Expect(claimPhase(ck)()).To(Equal(macvirtv1alpha1.ClaimReady))

		By("counting heartbeats past the heartbeat timeout with the class gone")
		clock.Advance(3 * time.Minute) // the default heartbeatTimeout is 2m
		touch(mk)
		Eventually(conditionOf(mk, macvirtv1alpha1.ConditionGuestAgentReady)).WithTimeout(timeout).Should(
			HaveField("Reason", macvirtv1alpha1.ReasonHeartbeatStale))
		heartbeatRunning(ctx, poolNS)
		Eventually(phase(mk)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
		Expect(conditionOf(mk, macvirtv1alpha1.ConditionGuestAgentReady)().Status).To(Equal(metav1.ConditionTrue))
		Eventually(claimPhase(ck)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))

		By("pruning the snapshot once no machine records its revision")
		Expect(snapshotsOf(class.Name)(Default)).To(ConsistOf(HaveField("ObjectMeta.Labels",
			HaveKeyWithValue(macvirtv1alpha1.LabelClassRevision, rev))))
		Expect(k8sClient.Delete(ctx, getClaim(ck))).To(Succeed()) // reclaimPolicy Delete: the machine goes
		Eventually(snapshotsOf(class.Name)).WithTimeout(timeout).Should(BeEmpty())
	})

	It("re-renders a machine whose VM is deleted from its recorded revision, not from the changed class", func() {
		ctx := context.Background()
		ns := newNamespace()
		class := newClass()
		k := key(newMachine(ns, class.Name))
		DeferCleanup(deleteAndWait, k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		old := vmOf(k)()
		Expect(old).NotTo(BeNil())
		cores, memory := old.Spec.Template.Spec.Domain.CPU.Cores, old.Spec.Template.Spec.Domain.Memory.Guest.DeepCopy()
		rev := getMachine(k).Spec.ClassRevision

		By("changing the class's CPU and memory")
		c := &macvirtv1alpha1.MacClass{}
		Expect(k8sClient.Get(ctx, key(class), c)).To(Succeed())
		before := c.DeepCopy()
		bigger := resource.MustParse("32Gi")
		c.Spec.Resources.CPU, c.Spec.Resources.Memory = int32(cores)*2, &bigger
		Expect(k8sClient.Patch(ctx, c, client.MergeFrom(before))).To(Succeed())
		Eventually(func(g Gomega) string {
			g.Expect(k8sClient.Get(ctx, key(class), c)).To(Succeed())
			return c.Status.Revision
		}).WithTimeout(timeout).ShouldNot(Or(BeEmpty(), Equal(rev)))

		By("deleting the VM")
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func(g Gomega) {
			vm := vmOf(k)()
			g.Expect(vm).NotTo(BeNil())
			g.Expect(vm.UID).NotTo(Equal(old.UID))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		vm := vmOf(k)()
		Expect(vm.Spec.Template.Spec.Domain.CPU.Cores).To(Equal(cores), "the VM is rendered from the machine's revision")
		Expect(vm.Spec.Template.Spec.Domain.Memory.Guest.Cmp(memory)).To(BeZero(), "the VM is rendered from the machine's revision")
		Expect(getMachine(k).Spec.ClassRevision).To(Equal(rev))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionClassUpToDate)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonClassChanged)))
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})
})

var _ = Describe("A machine's class revision", func() {
	It("is kept by the machine controller too, for a revision the class controller never got to", func() {
		DeferCleanup(startOperator(func(o *operator.Options) { o.Controllers = []operator.Controller{operator.MachineController} }))
		class := newClass()
		k := key(newMachine(newNamespace(), class.Name))
		DeferCleanup(deleteAndWait, k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		rev := getMachine(k).Spec.ClassRevision
		Eventually(snapshotsOf(class.Name)).WithTimeout(timeout).Should(ConsistOf(
			HaveField("ObjectMeta.Labels", HaveKeyWithValue(macvirtv1alpha1.LabelClassRevision, rev))))
	})
})

// snapshotsOf lists the operator's snapshots of a class's revisions.
func snapshotsOf(class string) func(Gomega) []appsv1.ControllerRevision {
	return func(g Gomega) []appsv1.ControllerRevision {
		var list appsv1.ControllerRevisionList
		g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(operatorNamespace),
			client.MatchingLabels{macvirtv1alpha1.LabelClass: class})).To(Succeed())
		return list.Items
	}
}
