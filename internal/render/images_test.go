package render_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// refreshed is a class whose image is refreshed from a registry, resolved
// to the import named pvc (none: not imported yet).
func refreshed(pvc string) classOption {
	return func(c *macvirtv1alpha1.MacClass) {
		url := "docker://registry.example.com/macos/sonoma:14"
		c.Spec.Image.SourceRef = nil
		c.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: &url}}
		c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 */6 * * *"}
		c.Status.Image = &macvirtv1alpha1.ClassImageStatus{DataImportCron: "sonoma-image", DataSource: "sonoma-image"}
		if pvc != "" {
			c.Status.Image.Resolved = &macvirtv1alpha1.ResolvedImage{Kind: macvirtv1alpha1.ImagePublishedAsPVC, Namespace: "macvirt-images", Name: pvc}
		}
	}
}

func TestARefreshedImageIsClonedFromItsResolvedImportAndItsRevisionFollowsTheDigest(t *testing.T) {
	g := NewWithT(t)
	a, b := testClass(refreshed("sonoma-image-aaaaaaaaaaaa")), testClass(refreshed("sonoma-image-bbbbbbbbbbbb"))
	_, dvs := renderOK(t, a, testMachine(), testOptions)
	system := dvs[1]
	g.Expect(system.Spec.Source.PVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: "macvirt-images", Name: "sonoma-image-aaaaaaaaaaaa"}),
		"machines clone the import, never the registry")
	g.Expect(system.Spec.Source.Registry).To(BeNil())
	g.Expect(render.ClassRevision(a)).NotTo(Equal(render.ClassRevision(b)), "a new digest is a new revision")
	g.Expect(render.ClassRevision(a)).To(Equal(render.ClassRevision(testClass(refreshed("sonoma-image-aaaaaaaaaaaa")))))
	g.Expect(testClass(refreshed("")).ImageUnresolved()).To(BeTrue())
	g.Expect(a.ImageUnresolved()).To(BeFalse())
	snap := testClass(refreshed("x"))
	snap.Status.Image.Resolved.Kind = macvirtv1alpha1.ImagePublishedAsSnapshot
	g.Expect(snap.EffectiveImage().Source.Snapshot).To(Equal(&cdiv1.DataVolumeSourceSnapshot{Namespace: "macvirt-images", Name: "x"}))
}

func TestAnInstallerMachineBootsRecoveryBesideABlankSystemDisk(t *testing.T) {
	g := NewWithT(t)
	class := testClass(func(c *macvirtv1alpha1.MacClass) {
		ns := "macvirt-images"
		c.Spec.Image.SourceRef = nil
		c.Spec.Image.Source = &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}
		c.Spec.Installer = &macvirtv1alpha1.InstallerSpec{RecoverySourceRef: cdiv1.DataVolumeSourceRef{
			Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "sequoia-recovery"}}
	})
	m := testMachine()
	vm, dvs := renderOK(t, class, m, testOptions)
	g.Expect(dvs).To(HaveLen(3))
	g.Expect(dvs[1].Spec.Source.Blank).NotTo(BeNil(), "the system disk is blank")
	g.Expect(dvs[1].Spec.Storage.Resources.Requests.Storage().String()).To(Equal("128Gi"), "of the class's size")
	g.Expect(dvs[2].Name).To(Equal(render.RecoveryDataVolumeName(m)))
	g.Expect(dvs[2].Spec.SourceRef.Name).To(Equal("sequoia-recovery"))
	g.Expect(dvs[2].Spec.Storage.Resources.Requests.Storage().String()).To(Equal("4Gi"))
	g.Expect(render.DataVolumeNames(class, m)).To(Equal([]string{dvs[0].Name, dvs[1].Name, dvs[2].Name}))
	disks := vm.Spec.Template.Spec.Domain.Devices.Disks
	g.Expect(disks[len(disks)-1].Name).To(Equal(render.RecoveryVolume))
	g.Expect(*disks[len(disks)-1].BootOrder).To(Equal(uint(3)), "OpenCore first; its picker offers recovery while the disk is blank")
	g.Expect(vm.Spec.Template.Spec.Volumes[len(vm.Spec.Template.Spec.Volumes)-1].DataVolume.Name).To(Equal(dvs[2].Name))
	g.Expect(render.ClassRevision(class)).NotTo(Equal(render.ClassRevision(testClass())))

	class.Spec.Installer.RecoverySize = ptr(resource.MustParse("6Gi"))
	_, dvs = renderOK(t, class, m, testOptions)
	g.Expect(dvs[2].Spec.Storage.Resources.Requests.Storage().String()).To(Equal("6Gi"))
	g.Expect(render.DataVolumeNames(testClass(), m)).To(HaveLen(2), "a class that installs nothing has two disks")
}
