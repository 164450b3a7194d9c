package scheme_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/macvirt/macvirt/internal/scheme"
)

// TestSchemeKnowsEveryKindTheOperatorUses fails with the missing group
// named, instead of the confusing "no kind is registered" error a manager
// would log at runtime.
func TestSchemeKnowsEveryKindTheOperatorUses(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatalf("building scheme: %v", err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"},
		{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstance"},
		{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolume"},
		{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataSource"},
		{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacClass"},
		{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacPool"},
		{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacClaim"},
		{Group: "macvirt.io", Version: "v1alpha1", Kind: "MacMachine"},
		{Group: "", Version: "v1", Kind: "Secret"},
	} {
		if !s.Recognizes(gvk) {
			t.Errorf("scheme.AddToScheme does not register %s: add its AddToScheme to internal/scheme", gvk)
		}
	}
}
