// Package v1beta1 is a compile-time stand-in for
// kubevirt.io/virt-template-api/core/v1beta1 (see
// hack/kubevirt/stubs/README.md).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ConditionReady is the condition KubeVirt's export controller reads.
const ConditionReady = "Ready"

// VirtualMachineTemplate carries the fields KubeVirt's informer factory and
// its export controller (pkg/storage/export, in virt-controller) name. The
// export of a template runs only under virt-template's feature gate, which
// macvirt's test clusters leave off, so none of them is ever read.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineTemplateSpec   `json:"spec,omitempty"`
	Status VirtualMachineTemplateStatus `json:"status,omitempty"`
}

// VirtualMachineTemplateSpec holds the embedded VirtualMachine and the
// template's parameters.
type VirtualMachineTemplateSpec struct {
	VirtualMachine *runtime.RawExtension `json:"virtualMachine,omitempty"`
	Parameters     []Parameter           `json:"parameters,omitempty"`
}

// VirtualMachineTemplateStatus holds the template's conditions.
type VirtualMachineTemplateStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Parameter is a named placeholder and its default value.
type Parameter struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// DeepCopy is never called: the export controller copies a template only
// when exporting one.
func (*VirtualMachineTemplate) DeepCopy() *VirtualMachineTemplate {
	panic("hack/kubevirt/stubs: virt-template-api is a compile-time stand-in and must not run")
}

// DeepCopyObject is never called.
func (*VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	panic("hack/kubevirt/stubs: virt-template-api is a compile-time stand-in and must not run")
}
