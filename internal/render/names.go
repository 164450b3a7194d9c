package render

import (
	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Volume and disk names inside the VirtualMachine.
const (
	// BootloaderVolume is the OpenCore disk, first in boot order.
	BootloaderVolume = "opencore"
	// SystemVolume is the macOS system disk.
	SystemVolume = "system"
	// RecoveryVolume is an installer machine's macOS recovery image.
	RecoveryVolume = "recovery"
	// AgentConfigVolume is the guest agent's config disk, from the
	// machine's agent Secret.
	AgentConfigVolume = "agent-config"
	// NetworkName is the pod network interface.
	NetworkName = "default"
)

// VirtualMachineName is the name of a machine's VirtualMachine: the
// machine's own name, in its namespace.
func VirtualMachineName(m *macvirtv1alpha1.MacMachine) string { return m.Name }

// SystemDataVolumeName is the deterministic name of a machine's system disk.
func SystemDataVolumeName(m *macvirtv1alpha1.MacMachine) string {
	return m.Name + "-" + SystemVolume
}

// BootloaderDataVolumeName is the deterministic name of a machine's
// OpenCore disk.
func BootloaderDataVolumeName(m *macvirtv1alpha1.MacMachine) string {
	return m.Name + "-" + BootloaderVolume
}

// RecoveryDataVolumeName is the name of an installer machine's recovery
// disk.
func RecoveryDataVolumeName(m *macvirtv1alpha1.MacMachine) string {
	return m.Name + "-" + RecoveryVolume
}

// DataVolumeNames lists the machine's DataVolumes, bootloader first, then
// the system disk, then an installer class's recovery disk. Without a class
// (a machine being deleted whose class is gone) every name a machine may
// have is listed.
func DataVolumeNames(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) []string {
	names := []string{BootloaderDataVolumeName(m), SystemDataVolumeName(m)}
	if class == nil || class.Spec.Installer != nil {
		names = append(names, RecoveryDataVolumeName(m))
	}
	return names
}

// Labels are put on every object rendered for a machine.
func Labels(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) map[string]string {
	l := map[string]string{
		macvirtv1alpha1.LabelMachine: m.Name,
		macvirtv1alpha1.LabelClass:   class.Name,
	}
	if pool := m.Labels[macvirtv1alpha1.LabelPool]; pool != "" {
		l[macvirtv1alpha1.LabelPool] = pool
	}
	return l
}

// AgentSecretName is the Secret holding a machine's guest-agent
// configuration (endpoint, CA bundle, token, machine), attached to its VM as
// the agent's config disk: the one the machine's AnnotationAgentSecret
// names, recorded with the token's hash. Machines whose token was issued
// before that annotation existed record only the hash; their Secret has the
// fixed name <machine>-agent, which is kept for them alone.
func AgentSecretName(m *macvirtv1alpha1.MacMachine) string {
	if name := m.Annotations[macvirtv1alpha1.AnnotationAgentSecret]; name != "" {
		return name
	}
	return m.Name + "-agent"
}
