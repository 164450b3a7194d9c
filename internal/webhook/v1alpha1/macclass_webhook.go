package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macclass,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macclasses,verbs=create;update,versions=v1alpha1,name=mmacclass-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macclass,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macclasses,verbs=create;update,versions=v1alpha1,name=vmacclass-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// classWebhook defaults and validates MacClasses.
type classWebhook struct {
	env ClassEnv
	// reviews creates SubjectAccessReviews: a class names only what its
	// author may use (validate_class_authority.go).
	reviews client.Client
	// imagesNamespace is where refreshed images are imported.
	imagesNamespace string
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

func (w *classWebhook) ValidateCreate(ctx context.Context, c *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	errs, warns := ValidateMacClass(c, w.env)
	authority, err := w.authorMayUse(ctx, nil, c)
	if err != nil {
		return warns, err
	}
	return warns, invalid("MacClass", c.Name, append(errs, authority...))
}

func (w *classWebhook) ValidateUpdate(ctx context.Context, old, c *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	errs, warns := ValidateMacClassUpdate(old, c, w.env)
	authority, err := w.authorMayUse(ctx, old, c)
	if err != nil {
		return warns, err
	}
	return warns, invalid("MacClass", c.Name, append(errs, authority...))
}

// authorMayUse refuses the references of c, new since old, that its
// author may not use themselves.
func (w *classWebhook) authorMayUse(ctx context.Context, old, c *macvirtv1alpha1.MacClass) (field.ErrorList, error) {
	rights, refused := classRights(c, w.imagesNamespace)
	if old != nil {
		oldRights, oldRefused := classRights(old, w.imagesNamespace)
		rights = newRights(oldRights, rights)
		was := map[string]bool{}
		for _, e := range oldRefused {
			was[e.Error()] = true
		}
		kept := refused[:0]
		for _, e := range refused {
			if !was[e.Error()] {
				kept = append(kept, e)
			}
		}
		refused = kept
	}
	errs, err := authorOwns(ctx, w.reviews, rights)
	return append(refused, errs...), err
}

func (w *classWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacClass) (admission.Warnings, error) {
	return nil, nil
}
