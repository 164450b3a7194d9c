// Package v1beta1 is a compile-time stand-in for
// kubevirt.io/virt-template-api/core/v1beta1 (see
// hack/kubevirt/stubs/README.md).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// VirtualMachineTemplate carries only what makes it a runtime.Object, which
// is all KubeVirt's informer factory asks of it.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// DeepCopyObject is never called by the domain XML generator.
func (*VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	panic("hack/kubevirt/stubs: virt-template-api is a compile-time stand-in and must not run")
}
