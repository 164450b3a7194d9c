// Package state reads, purely, what more than one controller needs to know
// of macvirt's objects: whether a machine is Ready or retained, whether a
// claim waits for a machine, which DataSources a class clones from. One
// reading, one place: the controllers, the cache indexes and the metrics
// agree because they ask the same function.
package state

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// MachineReady reports the machine's Ready condition.
func MachineReady(m *macvirtv1alpha1.MacMachine) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
}

// MachineUsable reports whether a tenant can use the machine now: Ready,
// and not suspended (a suspended machine is Ready to bind; its binding
// resumes it, and it is usable once its guest reports again).
func MachineUsable(m *macvirtv1alpha1.MacMachine) bool {
	return MachineReady(m) && m.Status.Phase != macvirtv1alpha1.MachineSuspended
}

// HoldsSlot reports whether a machine placed on a MacHost holds one of its
// licence slots: every one does, but an unbound one whose VM is suspended
// (a bound one is about to be resumed, and needs its slot).
func HoldsSlot(m *macvirtv1alpha1.MacMachine) bool {
	hv := m.Status.Host
	if hv == nil || m.Spec.ClaimRef != nil {
		return true
	}
	return hv.State != macvirtv1alpha1.HostVMSuspended
}

// Retains reports whether the machine is released, or bound under Retain
// and so released once its claim goes.
func Retains(m *macvirtv1alpha1.MacMachine) bool {
	return m.Labels[macvirtv1alpha1.LabelReleased] != "" ||
		m.Annotations[macvirtv1alpha1.AnnotationReclaimPolicy] == string(macvirtv1alpha1.ReclaimRetain)
}

// ClaimWaiting reports whether a claim has no machine yet.
func ClaimWaiting(c *macvirtv1alpha1.MacClaim) bool { return c.Status.MachineRef == nil }

// DataSourceRefs lists the DataSources a class clones from.
func DataSourceRefs(class *macvirtv1alpha1.MacClass) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ref := range []*cdiv1.DataVolumeSourceRef{class.Spec.Image.SourceRef, class.Spec.Bootloader.SourceRef} {
		if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
			continue
		}
		ns := ""
		if ref.Namespace != nil {
			ns = *ref.Namespace
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: ref.Name})
	}
	return out
}
