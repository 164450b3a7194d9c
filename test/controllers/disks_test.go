package controllers_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

var _ = Describe("Disks CDI cannot fill", func() {
	var ns string
	BeforeEach(func() {
		DeferCleanup(startOperator())
		ns = newNamespace()
		DeferCleanup(clock.Reset)
	})

	named := func(name string) func(*macvirtv1alpha1.MacMachine) {
		return func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", name }
	}

	// The retrying state before the limit lasts a few simulated back-offs,
	// too short to catch reliably here: TestComputeMachineStatusForDisksCDICannotFill
	// covers it.
	It("fail the machine, in CDI's words, once CDI's restarts of a failing import reach the limit", func() {
		class := newClass()
		sim.Inject(simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: ns, Name: "retry-system"})
		k := key(newMachine(ns, class.Name, named("retry")))
		DeferCleanup(deleteAndWait, k)

		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineFailed))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)()).To(And(
			HaveField("Reason", macvirtv1alpha1.ReasonDataVolumeFailed),
			HaveField("Message", And(ContainSubstring("retry-system keeps failing"), ContainSubstring("restarted its pod"),
				ContainSubstring("simulated fault DataVolumeFailed")))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionTrue))
	})

	It("a pool replaces a machine whose import keeps failing", func() {
		class := newClass()
		pool, pns := newPool(class.Name, 1, 3)
		first := types.NamespacedName{Namespace: pns, Name: pool.Name + "-0"}
		sim.Inject(simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: pns, Name: first.Name + "-system"})
		Eventually(func(g Gomega) types.UID { return getMachineWith(g, first).UID }).WithTimeout(timeout).ShouldNot(BeEmpty())
		uid := getMachine(first).UID

		Eventually(func(g Gomega) bool {
			for _, m := range machinesInWith(g, pns) {
				if m.UID == uid {
					return false
				}
			}
			return true
		}).WithTimeout(timeout).Should(BeTrue(), "the failing machine is deleted")
		Eventually(func(g Gomega) []macvirtv1alpha1.MacMachine { return machinesInWith(g, pns) }).WithTimeout(timeout).
			ShouldNot(BeEmpty(), "and replaced")
	})

	It("say a quota refuses a disk, Stalled, until the quota allows it", func() {
		class := newClass()
		fault := simulator.Fault{Kind: simulator.DataVolumeQuotaExceeded, Namespace: ns, Name: "quota-system"}
		sim.Inject(fault)
		k := key(newMachine(ns, class.Name, named("quota")))
		DeferCleanup(deleteAndWait, k)

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonDataVolumeQuotaExceeded),
			HaveField("Message", ContainSubstring("exceeded quota"))))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachineProvisioning))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", macvirtv1alpha1.ReasonDataVolumeQuotaExceeded)))
		Eventually(warningsAbout("quota", macvirtv1alpha1.ReasonDataVolumeQuotaExceeded)).WithTimeout(timeout).ShouldNot(BeEmpty())

		sim.Clear(fault)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionFalse))
	})

	It("of a machine created stopped on a WaitForFirstConsumer class show Stopped until first start, then fill", func() {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "local-wffc-"},
			Provisioner: "rancher.io/local-path", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
		Expect(k8sClient.Create(context.Background(), sc)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), sc) })
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.StorageClassName, c.Spec.Bootloader.StorageClassName = &sc.Name, &sc.Name
		})
		k := key(newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.Spec.Running = ptr.To(false) }))
		DeferCleanup(deleteAndWait, k)

		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineStopped))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)()).To(And(
			HaveField("Reason", macvirtv1alpha1.ReasonStopped), HaveField("Message", ContainSubstring("populate on first start"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)()).To(And(
			HaveField("Reason", macvirtv1alpha1.ReasonWaitingForFirstConsumer), HaveField("Message", ContainSubstring("PendingPopulation"))))

		Eventually(func(g Gomega) {
			m := getMachineWith(g, k)
			before := m.DeepCopy()
			m.Spec.Running = ptr.To(true)
			g.Expect(k8sClient.Patch(context.Background(), m, client.MergeFrom(before))).To(Succeed())
		}).WithTimeout(timeout).Should(Succeed())
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})

	It("of a class whose DataSource has no source yet: the class is not Ready and the machine says what it waits for", func() {
		images := newNamespace()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef.Namespace, c.Spec.Bootloader.SourceRef.Namespace = &images, &images
		})
		goldenImages(images, "opencore")
		k := key(newMachine(ns, class.Name))
		DeferCleanup(deleteAndWait, k)
		system := fmt.Sprintf("DataSource %s/sonoma", images)

		// CDI refuses a DataVolume that clones from a DataSource that does
		// not exist: the machine makes none and says what to create.
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonWaitingForDiskSource),
			HaveField("Message", ContainSubstring(system+" does not exist, and CDI refuses a DataVolume"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionTrue))
		systemDisk := types.NamespacedName{Namespace: ns, Name: render.SystemDataVolumeName(getMachine(k))}
		err := k8sClient.Get(context.Background(), systemDisk, &cdiv1.DataVolume{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the system disk's DataVolume: %v", err)
		Expect(warningsAbout(k.Name, macvirtv1alpha1.ReasonCreateFailed)()).To(BeEmpty(), "no create was tried and refused")

		// The DataSource exists, but its PVC does not: CDI starts the clone
		// and reports CloneWithoutSource.
		Expect(k8sClient.Create(context.Background(), dataSourceOf(images, "sonoma"))).To(Succeed())
		classReady := func() metav1.Condition {
			return pollCondition(types.NamespacedName{Name: class.Name}, macvirtv1alpha1.ConditionReady, &macvirtv1alpha1.MacClass{},
				func(c *macvirtv1alpha1.MacClass) []metav1.Condition { return c.Status.Conditions })()
		}
		Eventually(classReady).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonDataSourceNotReady),
			HaveField("Message", ContainSubstring("PVC not found"))))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonWaitingForDiskSource),
			HaveField("Message", ContainSubstring("CloneWithoutSource: The source pvc sonoma doesn't exist"))))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonWaitingForDiskSource)).WithTimeout(timeout).ShouldNot(BeEmpty())

		sourcePVC(images, "sonoma")
		Eventually(classReady).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})
})
