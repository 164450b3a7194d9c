package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// DataVolumes renders the machine's bootloader and system DataVolumes, in
// that order. They are created by the operator itself and referenced from
// the VM as dataVolume volumes, so CDI authorizes a cross-namespace clone
// against the operator's service account.
//
// The system disk is cloned from the class's effective image (a refreshed
// image's resolved import); an installer class's is blank, and its
// machines get a third disk, cloned from the recovery DataSource.
func DataVolumes(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine) []cdiv1.DataVolume {
	img := class.EffectiveImage()
	dvs := []cdiv1.DataVolume{
		dataVolume(class, m, BootloaderDataVolumeName(m), class.Spec.Bootloader.DiskSource, class.Spec.Bootloader.SizeOrDefault()),
		dataVolume(class, m, SystemDataVolumeName(m), img.DiskSource, img.SizeOrDefault()),
	}
	if in := class.Spec.Installer; in != nil {
		ref := in.RecoverySourceRef
		dvs = append(dvs, dataVolume(class, m, RecoveryDataVolumeName(m),
			macvirtv1alpha1.DiskSource{SourceRef: &ref, StorageClassName: img.StorageClassName}, RecoverySize(in)))
	}
	return dvs
}

// defaultRecoverySize holds a macOS recovery image (BaseSystem, about
// 3 GB when converted to raw).
var defaultRecoverySize = resource.MustParse("4Gi")

// RecoverySize is the size of an installer machine's recovery disk.
func RecoverySize(in *macvirtv1alpha1.InstallerSpec) resource.Quantity {
	if in.RecoverySize != nil && in.RecoverySize.Sign() > 0 {
		return *in.RecoverySize
	}
	return defaultRecoverySize
}

func dataVolume(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine, name string,
	src macvirtv1alpha1.DiskSource, size resource.Quantity) cdiv1.DataVolume {
	dv := cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       m.Namespace,
			Labels:          Labels(class, m),
			OwnerReferences: []metav1.OwnerReference{ownerRef(m)},
		},
		Spec: cdiv1.DataVolumeSpec{
			Storage: &cdiv1.StorageSpec{
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: canonical(size)},
				},
				StorageClassName: src.StorageClassName,
			},
		},
	}
	if src.Source != nil {
		dv.Spec.Source = src.Source.DeepCopy()
	}
	if src.SourceRef != nil {
		dv.Spec.SourceRef = src.SourceRef.DeepCopy()
	}
	return dv
}

// ownerRef makes the machine the controller owner of a rendered object, so
// a cluster's garbage collector removes leftovers and watches map back.
func ownerRef(m *macvirtv1alpha1.MacMachine) metav1.OwnerReference {
	t, f := true, true
	return metav1.OwnerReference{
		APIVersion:         macvirtv1alpha1.GroupVersion.String(),
		Kind:               "MacMachine",
		Name:               m.Name,
		UID:                m.UID,
		Controller:         &t,
		BlockOwnerDeletion: &f,
	}
}

// canonical re-parses a quantity so its cached string form is canonical and
// two equal quantities render to equal YAML.
func canonical(q resource.Quantity) resource.Quantity {
	return resource.MustParse(q.String())
}
