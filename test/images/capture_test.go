package images_test

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

const (
	tenantKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBu3mZ9f0rQeQ0yJ1S0Ukq8Vw3lJz1qW2x9b7kXo4h2c first-tenant@example.com"
	otherKey  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs second-tenant@example.com"
)

var _ = Describe("Capturing a Mac as a golden image", func() {
	It("stops it gracefully, copies its disk, starts it again, publishes a DataSource; a class on it makes Macs with their own token, host keys and serial, and none of the first tenant's files", func() {
		ns := namespace("capture")
		Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dotfiles"},
			Data: map[string]string{"netrc": "machine github.com login first-tenant password s3cret\n"}})).To(Succeed())

		By("a tenant's Mac, with their key and a bootstrap file")
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", SSHAuthorizedKeys: []string{tenantKey},
				Bootstrap: &macvirtv1alpha1.Bootstrap{
					Script: &macvirtv1alpha1.BootstrapScript{Inline: "true"},
					Files: []macvirtv1alpha1.BootstrapFile{{Path: "/Users/admin/.netrc",
						ConfigMapKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "dotfiles", Key: "netrc"}}},
				}}}
		Expect(admin.Create(ctx, claim)).To(Succeed())
		source := readyMachineOf(claim)
		sourceDisk := systemDisk(source)
		Eventually(func() string { return readGuestFile(sourceDisk, "/Users/admin/.netrc") }).Should(ContainSubstring("s3cret"))
		Eventually(func() string { return readGuestFile(sourceDisk, "/Users/admin/.ssh/authorized_keys") }).Should(ContainSubstring("first-tenant"))
		sourceTasks := taskDirs(sourceDisk)
		Expect(sourceTasks).NotTo(BeEmpty(), "the bootstrap task's record is on the disk")
		source = getMachine(key(source))
		sourceKeys, sourceToken := source.Status.Guest.SSHHostKeys, source.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
		Expect(sourceKeys).NotTo(BeEmpty())
		Expect(sourceToken).NotTo(BeEmpty())

		By("capturing it: the Mac stops gracefully, its disk is copied, it runs again")
		img := &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "sonoma-with-dotfiles"},
			Spec: macvirtv1alpha1.MacImageSpec{Source: macvirtv1alpha1.ImageSource{
				Claim: &macvirtv1alpha1.NamespacedName{Namespace: ns, Name: claim.Name}}, Description: "test capture",
				StorageClassName: ptr.To(fastClass)}}
		Expect(admin.Create(ctx, img)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, img) })
		Eventually(func() macvirtv1alpha1.MachinePhase { return getMachine(key(source)).Status.Phase }).
			Should(Equal(macvirtv1alpha1.MachineStopped), "the capture stops the Mac before copying its disk")
		Eventually(func(g Gomega) {
			got := &macvirtv1alpha1.MacImage{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(img), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(macvirtv1alpha1.ImageReady), "%+v", got.Status.Conditions)
			img = got
		}).Should(Succeed())
		Expect(img.Status.Machine.Name).To(Equal(source.Name))
		Expect(img.Status.Copy.CloneStrategy).To(Equal("copy"),
			"the image says how CDI copied the disk: from the default class to another driver's, a host-assisted copy")
		Expect(img.Status.Size).NotTo(BeNil())
		Expect(img.Status.DataSource).To(Equal(&macvirtv1alpha1.NamespacedName{Namespace: "macvirt-images", Name: img.Name}))
		Expect(img.Status.PublishedAs).To(Equal(macvirtv1alpha1.ImagePublishedAsSnapshot), "the fast class can snapshot the copy")
		Eventually(func(g Gomega) {
			g.Expect(meta.FindStatusCondition(getClass(g, "sonoma").Status.Conditions, macvirtv1alpha1.ConditionFastClones)).To(
				HaveField("Reason", macvirtv1alpha1.ReasonCopyOnly), "a class on the default storage class warns that it can only copy")
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			m := getMachineWith(g, key(source))
			g.Expect(m.Annotations).NotTo(HaveKey(macvirtv1alpha1.AnnotationCapture))
			g.Expect(m.Status.Phase).To(Equal(macvirtv1alpha1.MachineReady))
		}).Should(Succeed(), "the Mac runs again for its tenant")
		imageDisk := imageVolume(img)
		Expect(readGuestFile(imageDisk, "/Users/admin/.netrc")).To(ContainSubstring("s3cret"),
			"the image holds what the Mac held (its clones shed it on their first boot)")
		showKubectl("macimage", "-o", "wide")

		By("a class on the image, and a Mac of it for another tenant")
		sample := &macvirtv1alpha1.MacClass{}
		Expect(admin.Get(ctx, types.NamespacedName{Name: "sonoma"}, sample)).To(Succeed())
		imagesNS := "macvirt-images"
		class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma-captured"}, Spec: *sample.Spec.DeepCopy()}
		class.Spec.Image.Source = nil
		class.Spec.Image.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &imagesNS, Name: img.Status.DataSource.Name}
		class.Spec.Image.StorageClassName = ptr.To(fastClass)
		Expect(admin.Create(ctx, class)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, class) })
		Eventually(func(g Gomega) {
			ready := meta.FindStatusCondition(getClass(g, class.Name).Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonImageLargerThanDisk), "the sample's 128Gi disk is smaller than the snapshot")
			g.Expect(ready.Message).To(ContainSubstring("set spec.image.size to " + img.Status.Size.String()))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			c := getClass(g, class.Name)
			c.Spec.Image.Size = img.Status.Size
			g.Expect(admin.Update(ctx, c)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(meta.IsStatusConditionTrue(getClass(g, class.Name).Status.Conditions, macvirtv1alpha1.ConditionReady)).To(BeTrue())
		}).Should(Succeed())
		other := namespace("clone")
		second := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "clone"},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: class.Name, SSHAuthorizedKeys: []string{otherKey}}}
		Expect(admin.Create(ctx, second)).To(Succeed())
		clone := readyMachineOf(second)
		Eventually(func(g Gomega) {
			m := getMachineWith(g, key(clone))
			g.Expect(m.Status.Guest).NotTo(BeNil())
			g.Expect(m.Status.Guest.SSHHostKeys).NotTo(BeEmpty())
			clone = m
		}).Should(Succeed())

		By("the clone is a Mac of its own")
		Expect(clone.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]).NotTo(BeEmpty())
		Expect(clone.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]).NotTo(Equal(sourceToken), "a fresh agent token")
		Expect(clone.Status.Guest.SSHHostKeys).NotTo(ContainElements(sourceKeys), "fresh SSH host keys")
		Expect(clone.Spec.SMBIOS.SerialNumber).NotTo(Equal(source.Spec.SMBIOS.SerialNumber), "a new serial")
		Expect(clone.Spec.SMBIOS.UUID).NotTo(Equal(source.Spec.SMBIOS.UUID))
		vm := &unstructuredVM{}
		Expect(vm.get(clone)).To(Succeed())
		Expect(vm.serial).To(Equal(clone.Spec.SMBIOS.SerialNumber), "the VM presents the clone's serial to macOS")
		Expect(clone.Status.Provisioning).NotTo(BeNil())
		Expect(clone.Status.Provisioning.CloneStrategy).To(Equal("snapshot"), "the machine reports how CDI cloned its disk: a snapshot restore")
		Eventually(func(g Gomega) {
			g.Expect(meta.FindStatusCondition(getClass(g, class.Name).Status.Conditions, macvirtv1alpha1.ConditionFastClones)).To(
				HaveField("Reason", macvirtv1alpha1.ReasonSnapshotClone))
		}).Should(Succeed())
		Expect(clone.Status.Provisioning.Duration).NotTo(BeNil())

		By("and holds nothing of the first tenant's")
		cloneDisk := systemDisk(clone)
		Eventually(func() string { return readGuestFile(cloneDisk, "/Users/admin/.ssh/authorized_keys") }).Should(ContainSubstring("second-tenant"))
		Expect(readGuestFile(cloneDisk, "/Users/admin/.ssh/authorized_keys")).NotTo(ContainSubstring("first-tenant"))
		Expect(readGuestFile(cloneDisk, "/Users/admin/.netrc")).To(BeEmpty(), "the first tenant's bootstrap file is gone")
		Expect(taskDirs(cloneDisk)).NotTo(ContainElements(sourceTasks), "no task of the first tenant counts as done on the clone")
		Expect(readGuestFile(imageDisk, "/var/db/macvirt-agent/tasks/"+sourceTasks[0]+"/task.json")).NotTo(BeEmpty(),
			"the image carried the first tenant's task record, which the clone shed")
		Expect(readGuestFile(cloneDisk, "/var/db/macvirt-agent/identity")).To(ContainSubstring(clone.Name))
	})
})

// namespace makes a namespace for one spec.
func namespace(prefix string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, ns) })
	return ns.Name
}

func key(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }

func getMachine(k types.NamespacedName) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	Expect(admin.Get(ctx, k, m)).To(Succeed())
	return m
}

func getMachineWith(g Gomega, k types.NamespacedName) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{}
	g.Expect(admin.Get(ctx, k, m)).To(Succeed())
	return m
}

// readyMachineOf waits for the claim to be Ready and returns its machine.
func readyMachineOf(claim *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.MacMachine {
	var ref *macvirtv1alpha1.ObjectRef
	Eventually(func(g Gomega) {
		c := &macvirtv1alpha1.MacClaim{}
		g.Expect(admin.Get(ctx, key(claim), c)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionReady)).To(BeTrue(), "%+v", c.Status.Conditions)
		ref = c.Status.MachineRef
		g.Expect(ref).NotTo(BeNil())
	}).Should(Succeed())
	return getMachine(types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name})
}

// systemDisk is the directory the simulated guest of m boots from.
func systemDisk(m *macvirtv1alpha1.MacMachine) string {
	pvc := &corev1.PersistentVolumeClaim{}
	Eventually(func() error {
		return admin.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: render.SystemDataVolumeName(m)}, pvc)
	}).Should(Succeed())
	dir, err := system.Simulator.VolumeDir(pvc.UID)
	Expect(err).NotTo(HaveOccurred())
	return dir
}

// imageVolume is what the image's published volume holds.
func imageVolume(img *macvirtv1alpha1.MacImage) string {
	k := types.NamespacedName{Namespace: img.Status.DataSource.Namespace, Name: img.Status.DataSource.Name}
	pvc := &corev1.PersistentVolumeClaim{}
	Expect(admin.Get(ctx, k, pvc)).To(Succeed())
	dir, err := system.Simulator.VolumeDir(pvc.UID)
	Expect(err).NotTo(HaveOccurred())
	return dir
}

// readGuestFile is a file of a simulated disk, "" when absent.
func readGuestFile(disk, path string) string {
	b, err := os.ReadFile(filepath.Join(disk, filepath.Clean("/"+path))) //nolint:gosec // the test's simulated disk.
	if err != nil {
		return ""
	}
	return string(b)
}

// taskDirs are the tasks the agent recorded on a simulated disk (each a
// directory; the agent's own files start with a dot).
func taskDirs(disk string) []string {
	var out []string
	for _, name := range guestEntries(disk, "/var/db/macvirt-agent/tasks") {
		if !strings.HasPrefix(name, ".") {
			out = append(out, name)
		}
	}
	return out
}

// guestEntries lists a directory of a simulated disk.
func guestEntries(disk, path string) []string {
	entries, _ := os.ReadDir(filepath.Join(disk, filepath.Clean("/"+path)))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// unstructuredVM reads the serial a machine's VM gives macOS.
type unstructuredVM struct{ serial string }

func (v *unstructuredVM) get(m *macvirtv1alpha1.MacMachine) error {
	vm := &kubevirtv1.VirtualMachine{}
	if err := admin.Get(ctx, key(m), vm); err != nil {
		return err
	}
	if fw := vm.Spec.Template.Spec.Domain.Firmware; fw != nil {
		v.serial = fw.Serial
	}
	return nil
}
