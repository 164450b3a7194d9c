package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// An installer class's machines are where macOS is installed by hand: a
// blank system disk, the recovery image, and no agent to wait for.
var _ = Describe("An installer class", func() {
	It("gives its machines a blank system disk and the recovery image, and reports them Ready with no agent", func() {
		DeferCleanup(startOperator())
		recovery := "recovery-" + rand.String(5)
		goldenImages("macvirt-images", recovery)
		images := "macvirt-images"
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}
			c.Spec.Installer = &macvirtv1alpha1.InstallerSpec{RecoverySourceRef: cdiv1.DataVolumeSourceRef{
				Kind: cdiv1.DataVolumeDataSource, Namespace: &images, Name: recovery}}
		})
		m := newMachine(newNamespace(), class.Name)
		Eventually(phase(key(m))).Should(Equal(macvirtv1alpha1.MachineReady))
		Expect(conditionOf(key(m), macvirtv1alpha1.ConditionReady)()).To(HaveField("Reason", macvirtv1alpha1.ReasonInstaller))
		Expect(getMachine(key(m)).Status.Guest).To(BeNil(), "Ready without a heartbeat")

		system, rec := &cdiv1.DataVolume{}, &cdiv1.DataVolume{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: m.Namespace, Name: render.SystemDataVolumeName(m)}, system)).To(Succeed())
		Expect(system.Spec.Source.Blank).NotTo(BeNil())
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: m.Namespace, Name: render.RecoveryDataVolumeName(m)}, rec)).To(Succeed())
		Expect(rec.Spec.SourceRef.Name).To(Equal(recovery))
		vm := vmOf(key(m))()
		Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Name", render.RecoveryVolume)))
	})
})
