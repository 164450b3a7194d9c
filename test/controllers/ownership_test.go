package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

var _ = Describe("Objects the machine does not control", func() {
	var ns, class string
	BeforeEach(func() {
		DeferCleanup(startOperator())
		ns, class = newNamespace(), newClass().Name
	})

	// someonesVM creates a VirtualMachine that always runs and that no
	// machine controls, and waits until the simulated KubeVirt runs it.
	// labels go on its template, so its instance carries them.
	someonesVM := func(name string, labels map[string]string) *kubevirtv1.VirtualMachine {
		vm := &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: kubevirtv1.VirtualMachineSpec{
				RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
				Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{
						Resources: kubevirtv1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
					}},
				},
			},
		}
		Expect(k8sClient.Create(context.Background(), vm)).To(Succeed())
		Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(k8sClient.Get(context.Background(), key(vm), vmi)).To(Succeed())
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
			g.Expect(k8sClient.Get(context.Background(), key(vm), vm)).To(Succeed())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
		}).WithTimeout(timeout).Should(Succeed())
		return vm
	}

	// someonesDataVolume creates a DataVolume that no machine controls.
	someonesDataVolume := func(name string) *cdiv1.DataVolume {
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/someones.qcow2"}},
				Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			},
		}
		Expect(k8sClient.Create(context.Background(), dv)).To(Succeed())
		return dv
	}

	named := func(name string, mods ...func(*macvirtv1alpha1.MacMachine)) func(*macvirtv1alpha1.MacMachine) {
		return func(m *macvirtv1alpha1.MacMachine) {
			m.GenerateName, m.Name = "", name
			for _, mod := range mods {
				mod(m)
			}
		}
	}

	// untouched asserts, for a few seconds, that the VM is as it was: its
	// spec not written (same generation; its status is virt-controller's to
	// write), still running, owned by nobody.
	untouched := func(vm *kubevirtv1.VirtualMachine) {
		GinkgoHelper()
		Consistently(func(g Gomega) {
			got := &kubevirtv1.VirtualMachine{}
			g.Expect(k8sClient.Get(context.Background(), key(vm), got)).To(Succeed())
			g.Expect(got.Generation).To(Equal(vm.Generation), "the VM's spec is never written")
			g.Expect(got.Spec.RunStrategy).To(HaveValue(Equal(kubevirtv1.RunStrategyAlways)))
			g.Expect(got.OwnerReferences).To(BeEmpty())
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(k8sClient.Get(context.Background(), key(vm), vmi)).To(Succeed())
			g.Expect(vmi.DeletionTimestamp).To(BeNil(), "its instance is not stopped")
		}).WithTimeout(3 * time.Second).Should(Succeed())
	}

	It("a machine named after someone's VirtualMachine and DataVolume leaves them alone and says so", func() {
		const name = "build-1"
		// The instance even carries the machine's label: a label is not ownership.
		vm := someonesVM(name, map[string]string{macvirtv1alpha1.LabelMachine: name})
		dv := someonesDataVolume(name + "-" + render.BootloaderVolume)
		k := key(newMachine(ns, class, named(name)))

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonNotOwned)))
		Expect(getMachine(k).Status.Phase).To(Equal(macvirtv1alpha1.MachinePending))
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionStalled)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", macvirtv1alpha1.ReasonNotOwned),
			HaveField("Message", ContainSubstring("VirtualMachine %s/%s (its controller: none)", ns, name)),
			HaveField("Message", ContainSubstring("DataVolume %s/%s (its controller: none)", ns, dv.Name)),
			HaveField("Message", ContainSubstring("not controlled by this MacMachine"))))
		Eventually(warningsAbout(name, macvirtv1alpha1.ReasonNotOwned)).WithTimeout(timeout).ShouldNot(BeEmpty())
		m := getMachine(k)
		Expect(m.Status.VirtualMachineName).To(BeEmpty(), "the VM is not reported as the machine's")
		Expect(m.Status.NodeName).To(BeEmpty(), "nor is its instance")

		untouched(vm)
		got := &cdiv1.DataVolume{}
		Expect(k8sClient.Get(context.Background(), key(dv), got)).To(Succeed())
		Expect(got.OwnerReferences).To(BeEmpty())
		Expect(apierrors.IsNotFound(k8sClient.Get(context.Background(),
			types.NamespacedName{Namespace: ns, Name: name + "-" + render.SystemVolume}, &cdiv1.DataVolume{}))).
			To(BeTrue(), "nothing is created while the clash lasts")

		By("deleting the machine removes its finalizer and leaves someone's objects")
		deleteAndWait(k)
		afterVM := &kubevirtv1.VirtualMachine{}
		Expect(k8sClient.Get(context.Background(), key(vm), afterVM)).To(Succeed())
		Expect(afterVM.UID).To(Equal(vm.UID))
		Expect(afterVM.DeletionTimestamp).To(BeNil())
		Expect(afterVM.Spec.RunStrategy).To(HaveValue(Equal(kubevirtv1.RunStrategyAlways)), "the VM was not stopped")
		afterDV := &cdiv1.DataVolume{}
		Expect(k8sClient.Get(context.Background(), key(dv), afterDV)).To(Succeed())
		Expect(afterDV.UID).To(Equal(dv.UID))
		Expect(afterDV.DeletionTimestamp).To(BeNil())
	})

	It("a stopped machine named after someone's running VirtualMachine does not stop it", func() {
		const name = "build-2"
		vm := someonesVM(name, nil)
		k := key(newMachine(ns, class, named(name, func(m *macvirtv1alpha1.MacMachine) { m.Spec.Running = ptr.To(false) })))
		DeferCleanup(deleteAndWait, k)

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionStalled)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonNotOwned),
			HaveField("Message", ContainSubstring("VirtualMachine %s/%s (its controller: none)", ns, name))))
		untouched(vm)
	})

	It("a machine goes on by itself once someone's VirtualMachine of its name is deleted", func() {
		const name = "build-3"
		vm := someonesVM(name, nil)
		k := key(newMachine(ns, class, named(name)))
		DeferCleanup(deleteAndWait, k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(
			HaveField("Reason", macvirtv1alpha1.ReasonNotOwned))

		Expect(k8sClient.Delete(context.Background(), vm)).To(Succeed())
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		mine := vmOf(k)()
		Expect(mine).NotTo(BeNil())
		Expect(mine.UID).NotTo(Equal(vm.UID))
		Expect(mine.OwnerReferences).To(ContainElement(HaveField("UID", getMachine(k).UID)))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Status", metav1.ConditionFalse))
	})
})
