package v1alpha1

import (
	"context"
	"net"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macbuildkitequeue,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macbuildkitequeues,verbs=create;update,versions=v1alpha1,name=vmacbuildkitequeue-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// buildkiteQueueWebhook validates MacBuildkiteQueues: what CEL cannot
// check, and that whoever writes one may read the token Secret it names
// (the operator reads it for them; a queue must not lend them a token they
// could not read).
type buildkiteQueueWebhook struct {
	reviews client.Client
}

func (w *buildkiteQueueWebhook) ValidateCreate(ctx context.Context, q *macvirtv1alpha1.MacBuildkiteQueue) (admission.Warnings, error) {
	return w.validate(ctx, q, true)
}

func (w *buildkiteQueueWebhook) ValidateUpdate(ctx context.Context, old, q *macvirtv1alpha1.MacBuildkiteQueue) (admission.Warnings, error) {
	// Any change of where the token goes (its Secret, the endpoint, the
	// queue) is asked of the user making it, as at creation: an editor who
	// may not read the token must not send it elsewhere.
	return w.validate(ctx, q, old.Spec.Buildkite != q.Spec.Buildkite)
}

func (w *buildkiteQueueWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacBuildkiteQueue) (admission.Warnings, error) {
	return nil, nil
}

func (w *buildkiteQueueWebhook) validate(ctx context.Context, q *macvirtv1alpha1.MacBuildkiteQueue, review bool) (admission.Warnings, error) {
	errs, warns := ValidateMacBuildkiteQueue(q)
	if review && len(errs) == 0 {
		p := field.NewPath("spec", "buildkite", "tokenSecretName")
		readErrs, err := mayRead(ctx, w.reviews, q.Namespace, []sourceRef{{"secrets", q.Spec.Buildkite.TokenSecretName, p}},
			"a queue of theirs may not use its token")
		if err != nil {
			return warns, err
		}
		errs = append(errs, readErrs...)
	}
	return warns, invalid("MacBuildkiteQueue", q.Name, errs)
}

// ValidateMacBuildkiteQueue checks what the schema cannot: the endpoint
// and the agent's path, which goes into the Mac's task script.
func ValidateMacBuildkiteQueue(q *macvirtv1alpha1.MacBuildkiteQueue) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warns admission.Warnings
	spec := field.NewPath("spec")
	if ep := q.Spec.Buildkite.Endpoint; ep != "" {
		u, err := url.Parse(ep)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.RawQuery != "" || u.Fragment != "":
			errs = append(errs, field.Invalid(spec.Child("buildkite", "endpoint"), ep,
				"must be an http(s) URL of Buildkite's agent API without credentials, query or fragment, e.g. https://agent.buildkite.com/v3"))
		case u.Scheme == "http" && !loopback(u.Hostname()):
			warns = append(warns, "spec.buildkite.endpoint: plain http carries the agent token and every job acquisition token unencrypted; use https")
		}
	}
	if p := q.Spec.Agent.Path; p != "" && (strings.ContainsAny(p, "'\"`$\\\n;&|<> ") || strings.Contains(p, "..")) {
		errs = append(errs, field.Invalid(spec.Child("agent", "path"), p,
			"must be a plain path or command (no quotes, spaces, shell characters or ..), e.g. buildkite-agent or /opt/homebrew/bin/buildkite-agent"))
	}
	return errs, warns
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
