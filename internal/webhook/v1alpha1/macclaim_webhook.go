package v1alpha1

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macclaim,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macclaims,verbs=create;update,versions=v1alpha1,name=mmacclaim-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macclaim,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macclaims,verbs=create;update,versions=v1alpha1,name=vmacclaim-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// claimWebhook defaults and validates MacClaims.
type claimWebhook struct {
	lookup *lookup
	// reviews creates SubjectAccessReviews.
	reviews client.Client
}

func (w *claimWebhook) Default(_ context.Context, c *macvirtv1alpha1.MacClaim) error {
	DefaultMacClaim(c)
	return nil
}

func (w *claimWebhook) ValidateCreate(ctx context.Context, c *macvirtv1alpha1.MacClaim) (admission.Warnings, error) {
	env, err := w.env(ctx, c)
	if err != nil {
		return nil, err
	}
	errs, warns := ValidateMacClaim(c, env)
	sourceErrs, err := mayReadSources(ctx, w.reviews, c)
	if err != nil {
		return warns, err
	}
	return warns, invalid("MacClaim", c.Name, append(errs, sourceErrs...))
}

// ValidateUpdate checks what may change; the namespace's tenancy was
// checked when the claim was created and is the controller's to enforce
// afterwards.
func (w *claimWebhook) ValidateUpdate(ctx context.Context, old, c *macvirtv1alpha1.MacClaim) (admission.Warnings, error) {
	errs := ValidateMacClaimUpdate(old, c)
	if old.Spec.Access.Type != c.Spec.Access.Type {
		// A new access type must be one the class allows, as at creation.
		env, err := w.env(ctx, c)
		if err != nil {
			return nil, err
		}
		if env.Class != nil {
			if _, r := tenancy.Access(env.Class, c.Spec.Access.Type); r != nil {
				errs = append(errs, field.Forbidden(field.NewPath("spec", "access", "type"), r.Message))
			}
		}
	}
	return nil, invalid("MacClaim", c.Name, errs)
}

func (w *claimWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacClaim) (admission.Warnings, error) {
	return nil, nil
}

// env looks up the claim's pool, class and namespace.
func (w *claimWebhook) env(ctx context.Context, c *macvirtv1alpha1.MacClaim) (ClaimEnv, error) {
	var env ClaimEnv
	className := c.Spec.ClassName
	if c.Spec.PoolName != "" {
		pool := &macvirtv1alpha1.MacPool{}
		ok, err := w.lookup.get(ctx, types.NamespacedName{Name: c.Spec.PoolName}, pool)
		if err != nil {
			return env, err
		}
		if ok {
			env.Pool = pool
			if className == "" {
				className = pool.Spec.ClassName
			}
		}
	}
	class, err := w.lookup.class(ctx, className)
	if err != nil {
		return env, err
	}
	env.Class = class
	ns := &corev1.Namespace{}
	ok, err := w.lookup.get(ctx, types.NamespacedName{Name: c.Namespace}, ns)
	if err != nil {
		return env, err
	}
	if ok {
		env.Namespace = ns
	}
	return env, nil
}
