package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// CRD-level defaults and CEL rules: what the API server enforces with no
// operator running.
var _ = Describe("The macvirt CRDs", func() {
	ctx := context.Background()

	It("fill a minimal MacClass with the documented defaults", func() {
		c := newClass()
		got := &macvirtv1alpha1.MacClass{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: c.Name}, got)).To(Succeed())
		s := got.Spec
		Expect(s.Resources.CPU).To(Equal(int32(4)))
		Expect(s.Resources.Memory.String()).To(Equal("8Gi"))
		Expect(s.Image.Size.String()).To(Equal("128Gi"))
		Expect(s.Bootloader.Size.String()).To(Equal("1Gi"))
		// The fields a macOS release defaults are the webhook's to write
		// (docs/admission.md); the operator computes the same values.
		Expect(s.Hardware).To(Equal(macvirtv1alpha1.HardwareSpec{DiskBus: "sata",
			SMC: macvirtv1alpha1.SMCSpec{Mode: "VirtualSMC"}, Display: macvirtv1alpha1.DisplaySpec{Model: "vga"}}))
		Expect(s.EffectiveHardware()).To(Equal(macvirtv1alpha1.HardwareSpec{
			CPUModel: "Haswell-noTSX", NICModel: "vmxnet3", DiskBus: "sata",
			SMC: macvirtv1alpha1.SMCSpec{Mode: "VirtualSMC"}, SMBIOS: macvirtv1alpha1.ClassSMBIOS{ProductName: "iMacPro1,1"},
			Display: macvirtv1alpha1.DisplaySpec{Model: "vga"}}))
		Expect(s.Lifecycle.DrainGracePeriod.Duration).To(Equal(time.Hour))
		Expect(s.Placement.NodeSelector).To(Equal(map[string]string{"macvirt.io/apple-hardware": "true"}))
		Expect(s.Placement.Tolerations).To(Equal([]corev1.Toleration{{Key: "macvirt.io/apple-hardware",
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}))
		Expect(s.Lifecycle.ShutdownGracePeriod.Duration).To(Equal(5 * time.Minute))
		Expect(s.Lifecycle.BootTimeout.Duration).To(Equal(20 * time.Minute))
		Expect(s.Lifecycle.HeartbeatTimeout.Duration).To(Equal(2 * time.Minute))
		Expect(*s.Tenancy.OnDemand).To(BeTrue())
	})

	It("fill defaults of a pool, a claim and a machine", func() {
		ns := newNamespace()
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma"}}
		Expect(k8sClient.Create(ctx, pool)).To(Succeed())
		Expect(pool.Spec.Namespace).To(Equal("macvirt-pools"))
		Expect(*pool.Spec.Idle).To(Equal(int32(1)))
		Expect(pool.Spec.MaxProvisioning).To(Equal(int32(2)))
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "claim-", Namespace: ns},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
		Expect(k8sClient.Create(ctx, claim)).To(Succeed())
		Expect(claim.Spec.ReclaimPolicy).To(Equal(macvirtv1alpha1.ReclaimDelete))
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{GenerateName: "m-", Namespace: ns},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "no-operator-here"}}
		Expect(k8sClient.Create(ctx, m)).To(Succeed())
		Expect(*m.Spec.Running).To(BeTrue())
		DeferCleanup(func() { _ = k8sClient.Delete(ctx, m) })
	})

	DescribeTable("reject an invalid MacClass, naming the field",
		func(mod func(*macvirtv1alpha1.MacClass), message string) {
			c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-"},
				Spec: macvirtv1alpha1.MacClassSpec{
					Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{
						Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/a.qcow2"}}}},
					Bootloader: macvirtv1alpha1.BootloaderSpec{DiskSource: macvirtv1alpha1.DiskSource{
						Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/oc.img"}}}},
				}}
			mod(c)
			Expect(k8sClient.Create(ctx, c)).To(MatchError(ContainSubstring(message)))
		},
		Entry("two sources", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Name: "x"}
		}, "spec.image: Invalid value: set exactly one of source or sourceRef"),
		Entry("no bootloader source, which leaves no bootloader", func(c *macvirtv1alpha1.MacClass) { c.Spec.Bootloader.Source = nil },
			"bootloader is required for a KubeVirt class: give the OpenCore disk's source, or set runtime: Virtualization"),
		Entry("a bootloader without a source", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Bootloader.Source, c.Spec.Bootloader.Size = nil, ptrTo(resource.MustParse("1Gi"))
		}, "spec.bootloader: Invalid value: set exactly one of source or sourceRef"),
		Entry("a Virtualization class with a bootloader", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Runtime = macvirtv1alpha1.RuntimeVirtualization
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptrTo("docker://ghcr.io/cirruslabs/macos-sequoia-base:latest")}}
		}, "a Virtualization class has no bootloader"),
		Entry("a Virtualization class whose image is not a registry's", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Runtime, c.Spec.Bootloader = macvirtv1alpha1.RuntimeVirtualization, macvirtv1alpha1.BootloaderSpec{}
		}, "a Virtualization class takes its VM image from image.source.registry.url"),
		Entry("a KubeVirt class that would power off after its grace period", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.AfterShutdownGracePeriod = macvirtv1alpha1.AfterGracePowerOff
		}, "PowerOff is for Virtualization classes"),
		Entry("a KubeVirt class with a pull policy", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.PullPolicy = macvirtv1alpha1.PullAlways
		}, "image.pullPolicy is for Virtualization classes"),
		Entry("a pull policy nobody knows", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.PullPolicy = "Never"
		}, `spec.image.pullPolicy: Unsupported value: "Never"`),
		Entry("an after-grace policy nobody knows", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.AfterShutdownGracePeriod = "Kill"
		}, `spec.lifecycle.afterShutdownGracePeriod: Unsupported value: "Kill"`),
		Entry("one vCPU", func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.CPU = 1 },
			"spec.resources.cpu: Invalid value: 1: spec.resources.cpu in body should be greater than or equal to 2"),
		Entry("too little memory", func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.Memory = ptrTo(resource.MustParse("2Gi")) },
			"memory must be at least 4Gi"),
		Entry("AppleSMC without its key", func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.SMC.Mode = macvirtv1alpha1.SMCModeAppleSMC },
			"smc.mode AppleSMC requires oskSecretRef"),
		Entry("an unknown NIC", func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.NICModel = "rtl8139" },
			`spec.hardware.nicModel: Unsupported value: "rtl8139"`),
		Entry("a zero grace period", func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.ShutdownGracePeriod = &metav1.Duration{}
		}, "shutdownGracePeriod must be between 1s and 24h"),
	)

	It("reject a pool whose maxUnhealthy is neither a count nor a percentage", func() {
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma", MaxUnhealthy: ptrTo(intstr.FromString("half"))}}
		Expect(k8sClient.Create(ctx, pool)).To(MatchError(ContainSubstring("maxUnhealthy must be a count >= 0 or a percentage")))
		pool.Spec.MaxUnhealthy = ptrTo(intstr.FromInt32(-1))
		Expect(k8sClient.Create(ctx, pool)).To(MatchError(ContainSubstring("maxUnhealthy must be a count >= 0 or a percentage")))
		for _, ok := range []intstr.IntOrString{intstr.FromString("40%"), intstr.FromInt32(2)} {
			p := pool.DeepCopy()
			p.Spec.MaxUnhealthy = &ok
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
			Expect(k8sClient.Delete(ctx, p)).To(Succeed())
		}
	})

	It("reject a pool whose maxMachines is below idle, and a class change", func() {
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{GenerateName: "pool-"},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma", Idle: ptrTo(int32(3)), MaxMachines: ptrTo(int32(2))}}
		Expect(k8sClient.Create(ctx, pool)).To(MatchError(ContainSubstring("maxMachines must be at least idle")))
		pool.Spec.MaxMachines = ptrTo(int32(5))
		Expect(k8sClient.Create(ctx, pool)).To(Succeed())
		before := pool.DeepCopy()
		pool.Spec.ClassName = "ventura"
		Expect(k8sClient.Patch(ctx, pool, client.MergeFrom(before))).To(MatchError(ContainSubstring("className is immutable")))
	})

	It("reject a claim naming neither class nor pool", func() {
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "claim-", Namespace: newNamespace()}}
		Expect(k8sClient.Create(ctx, claim)).To(MatchError(ContainSubstring("set className, poolName, or both")))
	})

	It("keep a machine's claimRef, identity and class immutable once set", func() {
		ns := newNamespace()
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{GenerateName: "m-", Namespace: ns},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "c", ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: ns, Name: "a", UID: "u1"},
				SMBIOS: &macvirtv1alpha1.MachineSMBIOS{SerialNumber: "C02AB1CDHX87"}}}
		Expect(k8sClient.Create(ctx, m)).To(Succeed())
		for _, change := range []struct {
			mod     func(*macvirtv1alpha1.MacMachine)
			message string
		}{
			{func(m *macvirtv1alpha1.MacMachine) { m.Spec.ClaimRef.UID = "u2" }, "claimRef is set once"},
			{func(m *macvirtv1alpha1.MacMachine) { m.Spec.ClaimRef = nil }, "claimRef is set once"},
			{func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS.SerialNumber = "C02ZZ1CDHX87" }, "smbios is generated once"},
			{func(m *macvirtv1alpha1.MacMachine) { m.Spec.ClassName = "d" }, "className is immutable"},
		} {
			fresh := &macvirtv1alpha1.MacMachine{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(m), fresh)).To(Succeed())
			changed := fresh.DeepCopy()
			change.mod(changed)
			Expect(k8sClient.Update(ctx, changed)).To(MatchError(ContainSubstring(change.message)))
		}
	})

	It("lists all four kinds in the macvirt category with short names and printer columns", func() {
		for _, name := range []string{"macclasses", "macpools", "macclaims", "macmachines"} {
			crd := crdNamed(name + ".macvirt.io")
			Expect(crd.Spec.Names.Categories).To(ContainElement("macvirt"), name)
			Expect(crd.Spec.Names.ShortNames).NotTo(BeEmpty(), name)
			Expect(crd.Spec.Versions[0].Subresources.Status).NotTo(BeNil(), name)
			var cols []string
			for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
				cols = append(cols, c.Name)
			}
			Expect(cols).To(ContainElements("Ready", "Age"), name)
		}
	})
})

func ptrTo[T any](v T) *T { return &v }
