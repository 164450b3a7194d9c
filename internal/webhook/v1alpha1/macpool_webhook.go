package v1alpha1

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macpool,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macpools,verbs=create;update,versions=v1alpha1,name=mmacpool-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macpool,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macpools,verbs=create;update,versions=v1alpha1,name=vmacpool-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// poolWebhook defaults and validates MacPools.
type poolWebhook struct {
	lookup *lookup
}

func (w *poolWebhook) Default(_ context.Context, p *macvirtv1alpha1.MacPool) error {
	DefaultMacPool(p)
	return nil
}

func (w *poolWebhook) ValidateCreate(ctx context.Context, p *macvirtv1alpha1.MacPool) (admission.Warnings, error) {
	class, err := w.lookup.class(ctx, p.Spec.ClassName)
	if err != nil {
		return nil, err
	}
	errs, warns := ValidateMacPool(p, class)
	return warns, invalid("MacPool", p.Name, errs)
}

func (w *poolWebhook) ValidateUpdate(ctx context.Context, old, p *macvirtv1alpha1.MacPool) (admission.Warnings, error) {
	class, err := w.lookup.class(ctx, p.Spec.ClassName)
	if err != nil {
		return nil, err
	}
	errs, warns := ValidateMacPoolUpdate(old, p, class)
	return warns, invalid("MacPool", p.Name, errs)
}

func (w *poolWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacPool) (admission.Warnings, error) {
	return nil, nil
}
