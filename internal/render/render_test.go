package render_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/render"
)

func renderOK(t *testing.T, class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine, opts render.Options) (*kubevirtv1.VirtualMachine, []cdiv1.DataVolume) {
	t.Helper()
	vm, dvs, err := render.VirtualMachine(class, m, opts)
	if err != nil {
		t.Fatalf("render.VirtualMachine: %v", err)
	}
	return vm, dvs
}

func hookConfigOf(t *testing.T, vm *kubevirtv1.VirtualMachine) *contract.Config {
	t.Helper()
	cfg, err := contract.Parse(vm.Spec.Template.ObjectMeta.Annotations[contract.Annotation])
	if err != nil {
		t.Fatalf("hook annotation does not parse: %v", err)
	}
	return cfg
}

func TestVirtualMachineFirmwareIsEFIWithoutSecureBootOnQ35(t *testing.T) {
	g := NewWithT(t)
	vm, _ := renderOK(t, testClass(), testMachine(), testOptions)
	d := vm.Spec.Template.Spec.Domain
	g.Expect(d.Machine.Type).To(Equal("q35"))
	g.Expect(d.Firmware.Bootloader.EFI).NotTo(BeNil())
	g.Expect(*d.Firmware.Bootloader.EFI.SecureBoot).To(BeFalse())
	g.Expect(d.Firmware.Bootloader.BIOS).To(BeNil())
	g.Expect(string(d.Firmware.UUID)).To(Equal("5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60"))
	g.Expect(d.Firmware.Serial).To(Equal("C02XK1ZJHX87"))
}

func TestVirtualMachineBootsTheBootloaderFirstThenTheSystemDisk(t *testing.T) {
	g := NewWithT(t)
	vm, _ := renderOK(t, testClass(), testMachine(), testOptions)
	disks := vm.Spec.Template.Spec.Domain.Devices.Disks
	g.Expect(disks).To(HaveLen(3))
	g.Expect(disks[0].Name).To(Equal(render.BootloaderVolume))
	g.Expect(*disks[0].BootOrder).To(Equal(uint(1)))
	g.Expect(disks[1].Name).To(Equal(render.SystemVolume))
	g.Expect(*disks[1].BootOrder).To(Equal(uint(2)))
	vols := vm.Spec.Template.Spec.Volumes
	g.Expect(vols[0].DataVolume.Name).To(Equal("sonoma-7k2xq-opencore"))
	g.Expect(vols[1].DataVolume.Name).To(Equal("sonoma-7k2xq-system"))
	// The agent's config disk never boots.
	g.Expect(disks[2].Name).To(Equal(render.AgentConfigVolume))
	g.Expect(disks[2].BootOrder).To(BeNil())
	g.Expect(disks[2].CDRom).NotTo(BeNil())
	g.Expect(vols[2].Secret.SecretName).To(Equal("sonoma-7k2xq-agent-4c1d6e0f2a"), "the Secret the machine records")
	g.Expect(vols[2].Secret.VolumeLabel).To(Equal("MACVIRTAGENT"))
	g.Expect(vm.Spec.DataVolumeTemplates).To(BeEmpty(), "DataVolumes are created by the operator, not templated")
}

func TestVirtualMachinePinsCPUAndMemorySoKubeVirtCannotEnableHotplug(t *testing.T) {
	g := NewWithT(t)
	vm, _ := renderOK(t, testClass(func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Resources = macvirtv1alpha1.ClassResources{CPU: 8, Memory: ptr(resource.MustParse("16Gi"))}
	}), testMachine(), testOptions)
	d := vm.Spec.Template.Spec.Domain
	g.Expect(d.CPU.Cores).To(Equal(uint32(8)))
	g.Expect(d.CPU.Sockets).To(Equal(uint32(1)))
	g.Expect(d.CPU.MaxSockets).To(Equal(d.CPU.Sockets))
	g.Expect(d.Memory.Guest.String()).To(Equal("16Gi"))
	g.Expect(d.Memory.MaxGuest.Cmp(*d.Memory.Guest)).To(Equal(0))
}

func TestVirtualMachineDiskBus(t *testing.T) {
	for _, bus := range []macvirtv1alpha1.DiskBus{macvirtv1alpha1.DiskBusSATA, macvirtv1alpha1.DiskBusVirtio} {
		t.Run(string(bus), func(t *testing.T) {
			vm, _ := renderOK(t, testClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.DiskBus = bus }), testMachine(), testOptions)
			// The class's bus is the system and bootloader disks'; the
			// agent's config CD-ROM stays on SATA, which macOS always reads.
			for _, d := range vm.Spec.Template.Spec.Domain.Devices.Disks {
				if d.Name == render.AgentConfigVolume {
					NewWithT(t).Expect(d.CDRom.Bus).To(Equal(kubevirtv1.DiskBusSATA))
					continue
				}
				NewWithT(t).Expect(string(d.Disk.Bus)).To(Equal(string(bus)))
			}
		})
	}
}

func TestVirtualMachineCPUModel(t *testing.T) {
	cases := map[macvirtv1alpha1.CPUModel]string{
		macvirtv1alpha1.CPUModelHaswellNoTSX:          "Haswell-noTSX",
		macvirtv1alpha1.CPUModelSkylakeClientNoTSXIBS: "Skylake-Client-noTSX-IBRS",
		macvirtv1alpha1.CPUModelHostPassthrough:       "host-passthrough",
		macvirtv1alpha1.CPUModelPenryn:                "host-model",
	}
	for model, wantVM := range cases {
		t.Run(string(model), func(t *testing.T) {
			g := NewWithT(t)
			vm, _ := renderOK(t, testClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.CPUModel = model }), testMachine(), testOptions)
			g.Expect(vm.Spec.Template.Spec.Domain.CPU.Model).To(Equal(wantVM))
			g.Expect(hookConfigOf(t, vm).CPU.Model).To(Equal(string(model)), "the hook sets the exact model")
		})
	}
}

func TestVirtualMachineNICModel(t *testing.T) {
	cases := map[macvirtv1alpha1.NICModel]string{
		macvirtv1alpha1.NICModelVmxnet3: "e1000",
		macvirtv1alpha1.NICModelE1000:   "e1000",
		macvirtv1alpha1.NICModelVirtio:  "virtio",
	}
	for model, wantVM := range cases {
		t.Run(string(model), func(t *testing.T) {
			g := NewWithT(t)
			vm, _ := renderOK(t, testClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.NICModel = model }), testMachine(), testOptions)
			ifaces := vm.Spec.Template.Spec.Domain.Devices.Interfaces
			g.Expect(ifaces).To(HaveLen(1))
			g.Expect(ifaces[0].Model).To(Equal(wantVM))
			g.Expect(ifaces[0].Masquerade).NotTo(BeNil())
			g.Expect(hookConfigOf(t, vm).NIC.Model).To(Equal(string(model)))
		})
	}
}

func TestHookConfigCarriesTheOSKOnlyInAppleSMCMode(t *testing.T) {
	g := NewWithT(t)
	opts := testOptions
	opts.OSK = "test-osk-value"
	vm, _ := renderOK(t, testClass(), testMachine(), opts)
	g.Expect(hookConfigOf(t, vm).SMC).To(Equal(contract.SMC{Mode: "VirtualSMC"}))

	apple := testClass(func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
			OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}}
	})
	vm, _ = renderOK(t, apple, testMachine(), opts)
	g.Expect(hookConfigOf(t, vm).SMC).To(Equal(contract.SMC{Mode: "AppleSMC", OSK: "test-osk-value"}))

	_, _, err := render.VirtualMachine(apple, testMachine(), testOptions)
	g.Expect(err).To(MatchError(ContainSubstring("smc.osk")))
}

func TestHookConfigCarriesIdentityDisplayAndEmulator(t *testing.T) {
	g := NewWithT(t)
	opts := testOptions
	opts.EmulatorPath = "/usr/local/bin/qemu-system-x86_64"
	vm, _ := renderOK(t, testClass(func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Hardware.Display.Model = macvirtv1alpha1.DisplayModelVMwareSVGA
		c.Spec.Hardware.SMBIOS.ProductName = "MacPro7,1"
	}), testMachine(), opts)
	cfg := hookConfigOf(t, vm)
	g.Expect(cfg.Version).To(Equal(contract.Version))
	g.Expect(cfg.SMBIOS).To(Equal(contract.SMBIOS{Manufacturer: "Apple Inc.", Product: "MacPro7,1",
		Serial: "C02XK1ZJHX87", BoardSerial: "C02123ABCDEHX87FG", UUID: "5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60"}))
	g.Expect(cfg.Display.Model).To(Equal("vmware-svga"))
	g.Expect(cfg.USBKeyboard).To(BeTrue())
	g.Expect(cfg.Emulator).To(Equal("/usr/local/bin/qemu-system-x86_64"))
}

func TestHookSidecarAnnotationNamesTheImageAndHookAPIVersion(t *testing.T) {
	g := NewWithT(t)
	vm, _ := renderOK(t, testClass(), testMachine(), testOptions)
	g.Expect(vm.Spec.Template.ObjectMeta.Annotations).To(HaveKeyWithValue("hooks.kubevirt.io/hookSidecars",
		`[{"args":["--version","v1alpha3"],"image":"ghcr.io/macvirt/domain-hook:v0.1.0"}]`))
	_, _, err := render.VirtualMachine(testClass(), testMachine(), render.Options{})
	g.Expect(err).To(MatchError(ContainSubstring("--hook-image")))
}

func TestVirtualMachinePlacementGracePeriodAndRunStrategy(t *testing.T) {
	g := NewWithT(t)
	class := testClass(func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Lifecycle.ShutdownGracePeriod.Duration = 90 * time.Second
		c.Spec.Placement.NodeSelector["topology.kubernetes.io/zone"] = "rack-2"
		c.Spec.Placement.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
	})
	vm, _ := renderOK(t, class, testMachine(), testOptions)
	spec := vm.Spec.Template.Spec
	g.Expect(*spec.TerminationGracePeriodSeconds).To(Equal(int64(90)))
	g.Expect(spec.NodeSelector).To(Equal(map[string]string{"macvirt.io/apple-hardware": "true", "topology.kubernetes.io/zone": "rack-2"}))
	g.Expect(spec.Tolerations).To(ConsistOf(HaveField("Key", "macvirt.io/apple-hardware")))
	g.Expect(spec.Affinity.PodAntiAffinity).NotTo(BeNil())
	g.Expect(*vm.Spec.RunStrategy).To(Equal(kubevirtv1.RunStrategyAlways))

	vm, _ = renderOK(t, class, testMachine(func(m *macvirtv1alpha1.MacMachine) { m.Spec.Running = ptr(false) }), testOptions)
	g.Expect(*vm.Spec.RunStrategy).To(Equal(kubevirtv1.RunStrategyHalted))
}

func TestRenderedObjectsAreLabelledOwnedAndDeterministicallyNamed(t *testing.T) {
	g := NewWithT(t)
	vm, dvs := renderOK(t, testClass(), testMachine(), testOptions)
	wantLabels := map[string]string{"macvirt.io/machine": "sonoma-7k2xq", "macvirt.io/class": "sonoma", "macvirt.io/pool": "ci-sonoma"}
	g.Expect(vm.Name).To(Equal("sonoma-7k2xq"))
	g.Expect(vm.Labels).To(Equal(wantLabels))
	g.Expect(vm.Spec.Template.ObjectMeta.Labels).To(Equal(wantLabels))
	g.Expect(dvs).To(HaveLen(2))
	g.Expect([]string{dvs[0].Name, dvs[1].Name}).To(Equal([]string{"sonoma-7k2xq-opencore", "sonoma-7k2xq-system"}))
	for _, refs := range [][]string{ownerUIDs(vm.OwnerReferences), ownerUIDs(dvs[0].OwnerReferences), ownerUIDs(dvs[1].OwnerReferences)} {
		g.Expect(refs).To(Equal([]string{"1b7f9a52-1c3e-4d1e-9a51-0d7c2b6e8f10"}))
	}
	g.Expect(*vm.OwnerReferences[0].Controller).To(BeTrue())
	for _, dv := range dvs {
		g.Expect(dv.Labels).To(Equal(wantLabels))
	}
}

func TestDataVolumesUseTheClassSourcesSizesAndStorageClass(t *testing.T) {
	g := NewWithT(t)
	class := testClass(func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Image.SourceRef = nil
		c.Spec.Image.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/sonoma.qcow2"}}
		c.Spec.Image.StorageClassName = ptr("fast-rbd")
		c.Spec.Image.Size = ptr(resource.MustParse("200Gi"))
	})
	_, dvs := renderOK(t, class, testMachine(), testOptions)
	boot, system := dvs[0], dvs[1]
	g.Expect(boot.Spec.SourceRef.Name).To(Equal("opencore-1.0"))
	g.Expect(boot.Spec.Source).To(BeNil())
	g.Expect(boot.Spec.Storage.Resources.Requests.Storage().String()).To(Equal("1Gi"))
	g.Expect(boot.Spec.Storage.StorageClassName).To(BeNil())
	g.Expect(system.Spec.Source.HTTP.URL).To(Equal("https://images.example.com/sonoma.qcow2"))
	g.Expect(system.Spec.SourceRef).To(BeNil())
	g.Expect(system.Spec.Storage.Resources.Requests.Storage().String()).To(Equal("200Gi"))
	g.Expect(*system.Spec.Storage.StorageClassName).To(Equal("fast-rbd"))
}

func TestVirtualMachineRefusesAMachineWithoutIdentity(t *testing.T) {
	_, _, err := render.VirtualMachine(testClass(), testMachine(func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS = nil }), testOptions)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("spec.smbios")))
}

func TestRenderDoesNotAliasTheClass(t *testing.T) {
	g := NewWithT(t)
	class := testClass()
	vm, _ := renderOK(t, class, testMachine(), testOptions)
	vm.Spec.Template.Spec.NodeSelector["changed"] = "yes"
	vm.Spec.Template.Spec.Tolerations[0].Key = "changed"
	g.Expect(class.Spec.Placement.NodeSelector).NotTo(HaveKey("changed"))
	g.Expect(class.Spec.Placement.Tolerations[0].Key).To(Equal("macvirt.io/apple-hardware"))
}

func TestClassRevision(t *testing.T) {
	g := NewWithT(t)
	base := render.ClassRevision(testClass())
	g.Expect(base).To(HaveLen(10))
	g.Expect(render.ClassRevision(testClass())).To(Equal(base), "stable")
	same := map[string]classOption{
		"defaults left unset": func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Resources.Memory, c.Spec.Image.Size, c.Spec.Bootloader.Size = nil, nil, nil
			c.Spec.Lifecycle.ShutdownGracePeriod = nil
		},
		"description":       func(c *macvirtv1alpha1.MacClass) { c.Spec.Description = "other" },
		"bootTimeout":       func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.BootTimeout.Duration = time.Hour },
		"heartbeatTimeout":  func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.HeartbeatTimeout.Duration = time.Hour },
		"tenancy":           func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.OnDemand = ptr(false) },
		"memory spelled 2x": func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.Memory = ptr(resource.MustParse("8192Mi")) },
	}
	for name, o := range same {
		g.Expect(render.ClassRevision(testClass(o))).To(Equal(base), name+" does not change a rendered VM")
	}
	differ := map[string]classOption{
		"cpu":       func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.CPU = 6 },
		"memory":    func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.Memory = ptr(resource.MustParse("12Gi")) },
		"image":     func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef.Name = "ventura" },
		"nic":       func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.NICModel = macvirtv1alpha1.NICModelVirtio },
		"placement": func(c *macvirtv1alpha1.MacClass) { c.Spec.Placement.NodeSelector = nil },
		"grace":     func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.ShutdownGracePeriod.Duration = time.Minute },
	}
	for name, o := range differ {
		g.Expect(render.ClassRevision(testClass(o))).NotTo(Equal(base), name+" changes a rendered VM")
	}
}

func ownerUIDs(refs []metav1.OwnerReference) []string {
	uids := make([]string, 0, len(refs))
	for _, r := range refs {
		uids = append(uids, string(r.UID))
	}
	return uids
}

// A machine whose token was issued before its Secret's name was recorded
// keeps mounting the Secret of the fixed name it was issued in.
func TestVirtualMachineMountsTheLegacyAgentSecretOfAMachineThatRecordsNoSecretName(t *testing.T) {
	g := NewWithT(t)
	vm, _ := renderOK(t, testClass(), testMachine(func(m *macvirtv1alpha1.MacMachine) {
		delete(m.Annotations, macvirtv1alpha1.AnnotationAgentSecret)
	}), testOptions)
	g.Expect(vm.Spec.Template.Spec.Volumes[2].Secret.SecretName).To(Equal("sonoma-7k2xq-agent"))
}
