// Package virttemplate is a compile-time stand-in for
// kubevirt.io/virt-template-client-go/virttemplate (see
// hack/kubevirt/stubs/README.md).
package virttemplate

import (
	"errors"

	"k8s.io/client-go/rest"
)

// TemplateV1beta1Interface is the part of the typed client KubeVirt's
// informer factory uses.
type TemplateV1beta1Interface interface {
	RESTClient() rest.Interface
}

// Clientset has no clients: NewForConfig never returns one.
type Clientset struct{}

// TemplateV1beta1 is never reached, since NewForConfig always fails.
func (*Clientset) TemplateV1beta1() TemplateV1beta1Interface {
	panic("hack/kubevirt/stubs: virt-template-client-go is a compile-time stand-in and must not run")
}

// NewForConfig always fails: the stand-in cannot talk to an API server.
func NewForConfig(*rest.Config) (*Clientset, error) {
	return nil, errors.New("hack/kubevirt/stubs: virt-template-client-go is a compile-time stand-in and must not run")
}
