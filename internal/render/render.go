package render

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Options carry the operator-wide settings that are not part of a class.
type Options struct {
	// DomainHook is the transport of the macOS domain settings, resolved
	// (never auto); "" is KubeVirt's hook sidecar.
	DomainHook contract.Transport
	// HookImage is the domain-hook sidecar image; required for KubeVirt's
	// hook sidecar transport.
	HookImage string
	// EmulatorPath, when set, overrides the QEMU binary on the node.
	EmulatorPath string
	// OSK is the AppleSMC key read from the class's oskSecretRef; used only
	// in AppleSMC mode.
	OSK string
}

// q35 is the machine type macOS needs (PCIe, ICH9 AHCI).
const q35 = "q35"

// VirtualMachine renders a machine's VirtualMachine and DataVolumes.
func VirtualMachine(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine,
	opts Options) (*kubevirtv1.VirtualMachine, []cdiv1.DataVolume, error) {
	cfg, err := HookConfig(class, m, opts)
	if err != nil {
		return nil, nil, err
	}
	annotations, err := HookAnnotations(cfg, opts)
	if err != nil {
		return nil, nil, err
	}
	grace := int64(class.Spec.Lifecycle.ShutdownGracePeriodOrDefault().Seconds())
	if grace <= 0 {
		return nil, nil, fmt.Errorf("class %s: spec.lifecycle.shutdownGracePeriod must be positive", class.Name)
	}
	labels := Labels(class, m)
	vm := &kubevirtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            VirtualMachineName(m),
			Namespace:       m.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{ownerRef(m)},
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: RunStrategy(m),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain:                        domain(class, m),
					Networks:                      []kubevirtv1.Network{{Name: NetworkName, NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
					Volumes:                       volumes(class, m),
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  copyMap(class.Spec.Placement.NodeSelector),
					Tolerations:                   copyTolerations(class.Spec.Placement.Tolerations),
					Affinity:                      class.Spec.Placement.Affinity.DeepCopy(),
				},
			},
		},
	}
	HostRules(&vm.Spec.Template.Spec)
	return vm, DataVolumes(class, m), nil
}

// Architecture is the only architecture macOS guests run on under KubeVirt
// (docs/install.md: Intel Macs).
const Architecture = "amd64"

// HostRules gives an instance spec what every macOS VM carries for its
// Apple host: one macOS licence slot requested and limited (an extended
// resource cannot be overcommitted: the pod must request what it limits;
// docs/licensing.md), and evictionStrategy External, so that a drain
// evicting the launcher pod has virt-api refuse the eviction and mark the
// instance for evacuation, which the operator acts on, instead of stopping
// or killing macOS under its tenant (docs/operations.md). And the
// architecture, amd64, named: a VM that names none gets the one KubeVirt's
// operator records, its own node's, which on a cluster with an arm64 control
// plane is arm64; virt-api then refuses the VM ("Memory hotplug is only
// available for x86_64 VMs", for the maxGuest every machine sets).
func HostRules(spec *kubevirtv1.VirtualMachineInstanceSpec) {
	spec.Architecture = Architecture
	res := &spec.Domain.Resources
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	res.Requests[macvirtv1alpha1.ResourceMacOSSlots] = resource.MustParse("1")
	res.Limits[macvirtv1alpha1.ResourceMacOSSlots] = resource.MustParse("1")
	spec.EvictionStrategy = ptr.To(kubevirtv1.EvictionStrategyExternal)
}

// RunStrategy is Always for a machine that should run and Halted otherwise.
func RunStrategy(m *macvirtv1alpha1.MacMachine) *kubevirtv1.VirtualMachineRunStrategy {
	s := kubevirtv1.RunStrategyAlways
	if m.Spec.Running != nil && !*m.Spec.Running {
		s = kubevirtv1.RunStrategyHalted
	}
	return &s
}

func domain(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) kubevirtv1.DomainSpec {
	res := class.Spec.Resources
	memory := canonical(res.MemoryOrDefault())
	maxMemory := memory.DeepCopy()
	secureBoot := false
	hw := class.Spec.EffectiveHardware()
	bus := kubevirtv1.DiskBus(hw.DiskBus)
	return kubevirtv1.DomainSpec{
		// Sockets equal to MaxSockets and Guest equal to MaxGuest pin the
		// topology: with KubeVirt's LiveUpdate rollout strategy it would
		// otherwise enable CPU and memory hotplug, which macOS lacks.
		CPU: &kubevirtv1.CPU{
			Sockets:    1,
			MaxSockets: 1,
			Cores:      uint32(res.CPU), //nolint:gosec // CRD validation bounds cpu to 2..64.
			Threads:    1,
			Model:      vmCPUModel(hw.CPUModel),
		},
		Memory:  &kubevirtv1.Memory{Guest: &memory, MaxGuest: &maxMemory},
		Machine: &kubevirtv1.Machine{Type: q35},
		Firmware: &kubevirtv1.Firmware{
			UUID:       types.UID(m.Spec.SMBIOS.UUID),
			Serial:     m.Spec.SMBIOS.SerialNumber,
			Bootloader: &kubevirtv1.Bootloader{EFI: &kubevirtv1.EFI{SecureBoot: &secureBoot}},
		},
		Features: &kubevirtv1.Features{ACPI: kubevirtv1.FeatureState{}},
		Devices: kubevirtv1.Devices{
			Disks: disks(class, bus),
			Interfaces: []kubevirtv1.Interface{{
				Name:                   NetworkName,
				Model:                  vmNICModel(hw.NICModel),
				InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}},
			}},
			// The tablet gives the domain a USB controller, which the hook's
			// USB keyboard attaches to, and absolute pointing over VNC.
			Inputs: []kubevirtv1.Input{{Name: "tablet", Type: kubevirtv1.InputTypeTablet, Bus: kubevirtv1.InputBusUSB}},
		},
	}
}

// disks are the machine's disks: OpenCore first in the boot order, then the
// system disk, the agent's config disk and, for an installer class, the
// recovery image (OpenCore's picker offers it while the system disk is
// blank).
func disks(class *macvirtv1alpha1.MacClass, bus kubevirtv1.DiskBus) []kubevirtv1.Disk {
	out := []kubevirtv1.Disk{
		disk(BootloaderVolume, bus, 1),
		disk(SystemVolume, bus, 2),
		// The agent's config disk: an ISO on a SATA CD-ROM, which macOS
		// mounts at /Volumes/<volume label> with its own drivers.
		{Name: AgentConfigVolume, DiskDevice: kubevirtv1.DiskDevice{CDRom: &kubevirtv1.CDRomTarget{Bus: kubevirtv1.DiskBusSATA}}},
	}
	if class.Spec.Installer != nil {
		out = append(out, disk(RecoveryVolume, bus, 3))
	}
	return out
}

func disk(name string, bus kubevirtv1.DiskBus, bootOrder uint) kubevirtv1.Disk {
	return kubevirtv1.Disk{
		Name:       name,
		BootOrder:  &bootOrder,
		DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: bus}},
	}
}

func volumes(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) []kubevirtv1.Volume {
	out := []kubevirtv1.Volume{
		{Name: BootloaderVolume, VolumeSource: kubevirtv1.VolumeSource{
			DataVolume: &kubevirtv1.DataVolumeSource{Name: BootloaderDataVolumeName(m)}}},
		{Name: SystemVolume, VolumeSource: kubevirtv1.VolumeSource{
			DataVolume: &kubevirtv1.DataVolumeSource{Name: SystemDataVolumeName(m)}}},
		{Name: AgentConfigVolume, VolumeSource: kubevirtv1.VolumeSource{
			Secret: &kubevirtv1.SecretVolumeSource{SecretName: AgentSecretName(m), VolumeLabel: guestprotocol.ConfigVolumeLabel}}},
	}
	if class.Spec.Installer != nil {
		out = append(out, kubevirtv1.Volume{Name: RecoveryVolume, VolumeSource: kubevirtv1.VolumeSource{
			DataVolume: &kubevirtv1.DataVolumeSource{Name: RecoveryDataVolumeName(m)}}})
	}
	return out
}

// vmCPUModel is the CPU model written into the VM spec. KubeVirt schedules a
// named model only onto nodes its node labeller lists it for, and lists no
// obsolete model such as Penryn, so Penryn asks for host-model and the hook
// sets the exact model on QEMU's command line.
func vmCPUModel(model macvirtv1alpha1.CPUModel) string {
	if model == macvirtv1alpha1.CPUModelPenryn {
		return kubevirtv1.CPUModeHostModel
	}
	return string(model)
}

// vmNICModel is the NIC model written into the VM spec. KubeVirt rejects
// vmxnet3 and e1000-82545em, so the VM asks for e1000 and the hook rewrites
// the model, keeping the MAC, PCI address and the interface KubeVirt wired.
func vmNICModel(model macvirtv1alpha1.NICModel) string {
	if model == macvirtv1alpha1.NICModelVirtio {
		return kubevirtv1.VirtIO
	}
	return "e1000"
}

func copyMap(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

func copyTolerations(in []corev1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
