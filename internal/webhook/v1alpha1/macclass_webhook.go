package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macclass,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macclasses,verbs=create;update,versions=v1alpha1,name=mmacclass-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macclass,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macclasses,verbs=create;update,versions=v1alpha1,name=vmacclass-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// classWebhook defaults and validates MacClasses.
type classWebhook struct {
	env ClassEnv
}

func (w *classWebhook) Default(ctx context.Context, c *macvirtv1alpha1.MacClass) error {
	var old *macvirtv1alpha1.MacClass
	if req, err := admission.RequestFromContext(ctx); err == nil && req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		old = &macvirtv1alpha1.MacClass{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return fmt.Errorf("decoding the MacClass being updated: %w", err)
		}
	}
	DefaultMacClassUpdate(old, c)
	return nil
}

func (w *classWebhook) ValidateCreate(_ context.Context, c *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	errs, warns := ValidateMacClass(c, w.env)
	return warns, invalid("MacClass", c.Name, errs)
}

func (w *classWebhook) ValidateUpdate(_ context.Context, old, c *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	errs, warns := ValidateMacClassUpdate(old, c, w.env)
	return warns, invalid("MacClass", c.Name, errs)
}

func (w *classWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	return nil, nil
}
