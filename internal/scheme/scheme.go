// Package scheme builds the runtime scheme of the macvirt manager: the
// Kubernetes built-ins, macvirt's own API, KubeVirt's kubevirt.io/v1 and
// CDI's cdi.kubevirt.io/v1beta1, KubeVirt's plugin.kubevirt.io/v1alpha1
// and CSI's snapshot.storage.k8s.io/v1. The manager and every test use this one
// function, so a type missing from it fails in tests, not at runtime.
package scheme

import (
	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// AddToScheme registers every API group the operator reads or writes.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		macvirtv1alpha1.AddToScheme,
		kubevirtv1.AddToScheme,
		cdiv1.AddToScheme,
		pluginv1alpha1.AddToScheme,
		snapshotv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// New returns a scheme with every API group the operator uses.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}
