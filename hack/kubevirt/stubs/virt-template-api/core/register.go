// Package api is a compile-time stand-in for kubevirt.io/virt-template-api/core
// (see hack/kubevirt/stubs/README.md): the constants KubeVirt's
// pkg/controller names, with the values of the real package.
package api

const (
	// GroupName is the API group of virt-template's kinds.
	GroupName = "template.kubevirt.io"
	// SingularResourceName is the singular resource of VirtualMachineTemplate.
	SingularResourceName = "virtualmachinetemplate"
	// PluralResourceName is the plural resource of VirtualMachineTemplate.
	PluralResourceName = SingularResourceName + "s"
)
