package tenancy

import (
	"fmt"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// ReasonBootstrapNotAllowed is the reason of a claim's bootstrap the class
// does not allow.
const ReasonBootstrapNotAllowed = "BootstrapNotAllowed"

// Bootstrap says whether class lets a claim carry bootstrap b: claims may
// carry one unless spec.tenancy.allowTenantBootstrap is false, and it may
// run as root, or place files owned by root, only where
// spec.tenancy.allowRootBootstrap is true. The webhook refuses with it, and
// the guest-agent endpoint hands nothing over that the class (changed since
// admission) no longer allows. Without a class (one not made yet, or gone)
// nothing may act as root.
func Bootstrap(class *macvirtv1alpha1.MacClass, b *macvirtv1alpha1.Bootstrap) *Refusal {
	if b == nil {
		return nil
	}
	var t macvirtv1alpha1.TenancySpec
	name := "(none)"
	if class != nil {
		t, name = class.Spec.Tenancy, class.Name
	}
	if !t.TenantBootstrapAllowed() {
		return &Refusal{Reason: ReasonBootstrapNotAllowed, Field: "spec.bootstrap", Message: fmt.Sprintf(
			"MacClass %s does not let claims carry a bootstrap (spec.tenancy.allowTenantBootstrap is false); "+
				"remove spec.bootstrap, or ask the class's admin", name)}
	}
	if t.AllowRootBootstrap {
		return nil
	}
	root := func(field string) *Refusal {
		return &Refusal{Reason: ReasonBootstrapNotAllowed, Field: field, Message: fmt.Sprintf(
			"MacClass %s does not let a claim's bootstrap act as root (spec.tenancy.allowRootBootstrap is false); "+
				"use the login user (leave it empty), or ask the class's admin", name)}
	}
	if b.User == macvirtv1alpha1.BootstrapRootUser {
		return root("spec.bootstrap.user")
	}
	for i, f := range b.Files {
		if f.Owner == macvirtv1alpha1.BootstrapRootUser {
			return root(fmt.Sprintf("spec.bootstrap.files[%d].owner", i))
		}
	}
	return nil
}
