package v1alpha1

import (
	"context"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/github"
)

// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macrunnerset,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macrunnersets,verbs=create;update,versions=v1alpha1,name=vmacrunnerset-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// runnerSetWebhook validates MacRunnerSets: what CEL cannot check, and
// that whoever writes one may read the credentials Secret it names (the
// operator reads it for them; a set must not lend them a token they could
// not read).
type runnerSetWebhook struct {
	reviews client.Client
}

func (w *runnerSetWebhook) ValidateCreate(ctx context.Context, s *macvirtv1alpha1.MacRunnerSet) (admission.Warnings, error) {
	return w.validate(ctx, s, true)
}

func (w *runnerSetWebhook) ValidateUpdate(ctx context.Context, old, s *macvirtv1alpha1.MacRunnerSet) (admission.Warnings, error) {
	changed := old.Spec.GitHub.CredentialsSecretName != s.Spec.GitHub.CredentialsSecretName || old.Spec.GitHub.URL != s.Spec.GitHub.URL
	return w.validate(ctx, s, changed)
}

func (w *runnerSetWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacRunnerSet) (admission.Warnings, error) {
	return nil, nil
}

func (w *runnerSetWebhook) validate(ctx context.Context, s *macvirtv1alpha1.MacRunnerSet, review bool) (admission.Warnings, error) {
	errs, warns := ValidateMacRunnerSet(s)
	if review && len(errs) == 0 {
		p := field.NewPath("spec", "github", "credentialsSecretName")
		readErrs, err := mayRead(ctx, w.reviews, s.Namespace, []sourceRef{{"secrets", s.Spec.GitHub.CredentialsSecretName, p}},
			"a runner set of theirs may not use its credentials")
		if err != nil {
			return warns, err
		}
		errs = append(errs, readErrs...)
	}
	return warns, invalid("MacRunnerSet", s.Name, errs)
}

// ValidateMacRunnerSet checks what the schema cannot: the GitHub address,
// the runner's directory, and warns where GitHub ignores what is asked.
func ValidateMacRunnerSet(s *macvirtv1alpha1.MacRunnerSet) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warns admission.Warnings
	spec := field.NewPath("spec")
	scope, err := github.ParseScope(s.Spec.GitHub.URL)
	if err != nil {
		errs = append(errs, field.Invalid(spec.Child("github", "url"), s.Spec.GitHub.URL, err.Error()))
	}
	if d := s.Spec.Runner.Directory; d != "" && (strings.ContainsAny(d, "'\"`$\\\n") || strings.Contains(d, "..")) {
		errs = append(errs, field.Invalid(spec.Child("runner", "directory"), d,
			"must be a plain path (no quotes, $, backslashes or ..), e.g. actions-runner or /opt/actions-runner"))
	}
	if len(errs) == 0 && len(s.Spec.Labels) > 0 && !scope.Hosted() {
		warns = append(warns, "spec.labels: GitHub Enterprise Server takes labels besides the scale set's name only from 3.18 with "+
			"the DistributedTask.AllowRunnerScaleSetCustomLabels feature flag (on by default from 3.21), and drops them silently otherwise")
	}
	return errs, warns
}
