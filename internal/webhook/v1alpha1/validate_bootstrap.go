package v1alpha1

import (
	"context"
	"fmt"
	"path"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// reservedEnv are the variables the agent sets for the task's user.
var reservedEnv = map[string]bool{"HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "MACVIRT_TASK_ID": true}

// validateBootstrap checks what the schema cannot: file paths, reserved
// variable names, the size of the literal environment, and, for a class's
// bootstrap (inline is true), that it names no Secret or ConfigMap.
func validateBootstrap(p *field.Path, b *macvirtv1alpha1.Bootstrap, inline bool) field.ErrorList {
	if b == nil {
		return nil
	}
	var errs field.ErrorList
	if b.Script == nil && len(b.Files) == 0 {
		errs = append(errs, field.Required(p.Child("script"), "a bootstrap needs a script or files; remove the bootstrap otherwise"))
	}
	if s := b.Script; s != nil {
		set := 0
		for _, on := range []bool{s.Inline != "", s.SecretKeyRef != nil, s.ConfigMapKeyRef != nil} {
			if on {
				set++
			}
		}
		if set != 1 {
			errs = append(errs, field.Invalid(p.Child("script"), "", "set exactly one of inline, secretKeyRef and configMapKeyRef"))
		}
		if len(s.Inline) > macvirtv1alpha1.MaxBootstrapScriptBytes {
			errs = append(errs, field.TooLong(p.Child("script", "inline"), "", macvirtv1alpha1.MaxBootstrapScriptBytes))
		}
		if inline && (s.SecretKeyRef != nil || s.ConfigMapKeyRef != nil) {
			errs = append(errs, field.Forbidden(p.Child("script"), "a class's bootstrap is inline: it would read the Secret or ConfigMap in every tenant's namespace; use inline"))
		}
	}
	envBytes := 0
	for i, e := range b.Env {
		ep := p.Child("env").Index(i)
		if reservedEnv[e.Name] {
			errs = append(errs, field.Invalid(ep.Child("name"), e.Name, "is set by the agent for the script's user; choose another name"))
		}
		if e.Value != "" && e.SecretKeyRef != nil {
			errs = append(errs, field.Invalid(ep, e.Name, "set value or secretKeyRef, not both"))
		}
		if inline && e.SecretKeyRef != nil {
			errs = append(errs, field.Forbidden(ep.Child("secretKeyRef"), "a class's bootstrap is inline: it would read the Secret in every tenant's namespace; use value"))
		}
		envBytes += len(e.Name) + len(e.Value)
	}
	if envBytes > macvirtv1alpha1.MaxBootstrapEnvBytes {
		errs = append(errs, field.TooLong(p.Child("env"), "", macvirtv1alpha1.MaxBootstrapEnvBytes))
	}
	for i, f := range b.Files {
		fp := p.Child("files").Index(i)
		if inline {
			errs = append(errs, field.Forbidden(fp, "a class's bootstrap places no files from Secrets or ConfigMaps; write them from its script"))
			continue
		}
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" || strings.Contains(f.Path, "\x00") {
			errs = append(errs, field.Invalid(fp.Child("path"), f.Path, "must be an absolute file path without . or .. elements or a trailing slash, e.g. /Users/admin/.npmrc"))
		}
		if (f.SecretKeyRef == nil) == (f.ConfigMapKeyRef == nil) {
			errs = append(errs, field.Invalid(fp, f.Path, "set exactly one of secretKeyRef and configMapKeyRef"))
		}
		if f.Mode != nil && (*f.Mode < 0 || *f.Mode > 0o777) {
			errs = append(errs, field.Invalid(fp.Child("mode"), *f.Mode, "must be 0 to 0777 (511 in decimal)"))
		}
	}
	return errs
}

// validateClaimBootstrap checks a claim's bootstrap against its class
// (internal/tenancy) and its own rules.
func validateClaimBootstrap(c *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) field.ErrorList {
	b := c.Spec.Bootstrap
	if b == nil {
		return nil
	}
	errs := validateBootstrap(field.NewPath("spec", "bootstrap"), b, false)
	if r := tenancy.Bootstrap(class, b); r != nil {
		errs = append(errs, field.Forbidden(fieldPath(r.Field), r.Message))
	}
	return errs
}

// fieldPath is a dotted path with [i] indexes as a field.Path.
func fieldPath(s string) *field.Path {
	var p *field.Path
	for _, part := range strings.Split(s, ".") {
		name, idx, indexed := strings.Cut(part, "[")
		if p == nil {
			p = field.NewPath(name)
		} else {
			p = p.Child(name)
		}
		if indexed {
			var i int
			if _, err := fmt.Sscanf(strings.TrimSuffix(idx, "]"), "%d", &i); err == nil {
				p = p.Index(i)
			}
		}
	}
	return p
}

// sourceRef is one Secret or ConfigMap a bootstrap names.
type sourceRef struct {
	resource, name string
	field          *field.Path
}

// bootstrapSources are the Secrets and ConfigMaps a bootstrap names.
func bootstrapSources(p *field.Path, b *macvirtv1alpha1.Bootstrap) []sourceRef {
	if b == nil {
		return nil
	}
	var refs []sourceRef
	if s := b.Script; s != nil {
		if s.SecretKeyRef != nil {
			refs = append(refs, sourceRef{"secrets", s.SecretKeyRef.Name, p.Child("script", "secretKeyRef")})
		}
		if s.ConfigMapKeyRef != nil {
			refs = append(refs, sourceRef{"configmaps", s.ConfigMapKeyRef.Name, p.Child("script", "configMapKeyRef")})
		}
	}
	for i, e := range b.Env {
		if e.SecretKeyRef != nil {
			refs = append(refs, sourceRef{"secrets", e.SecretKeyRef.Name, p.Child("env").Index(i).Child("secretKeyRef")})
		}
	}
	for i, f := range b.Files {
		if f.SecretKeyRef != nil {
			refs = append(refs, sourceRef{"secrets", f.SecretKeyRef.Name, p.Child("files").Index(i).Child("secretKeyRef")})
		}
		if f.ConfigMapKeyRef != nil {
			refs = append(refs, sourceRef{"configmaps", f.ConfigMapKeyRef.Name, p.Child("files").Index(i).Child("configMapKeyRef")})
		}
	}
	return refs
}

// mayReadSources asks the API server, with a SubjectAccessReview of the
// user making the request, whether that user may get each Secret and
// ConfigMap the claim's bootstrap names: a claim carries to its Mac only
// what its creator could read. Each source is asked about once.
func mayReadSources(ctx context.Context, c client.Client, claim *macvirtv1alpha1.MacClaim) (field.ErrorList, error) {
	refs := bootstrapSources(field.NewPath("spec", "bootstrap"), claim.Spec.Bootstrap)
	return mayRead(ctx, c, claim.Namespace, refs, "a claim of theirs may not carry it to a Mac")
}

// mayRead asks, with a SubjectAccessReview of the user making the request,
// whether that user may get each source in namespace, and refuses those
// they may not, saying so with consequence.
func mayRead(ctx context.Context, c client.Client, namespace string, refs []sourceRef, consequence string) (field.ErrorList, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("the admission request carries no user to check the sources for: %w", err)
	}
	u := req.UserInfo
	var errs field.ErrorList
	asked := map[string]bool{}
	for _, ref := range refs {
		if asked[ref.resource+"/"+ref.name] {
			continue
		}
		asked[ref.resource+"/"+ref.name] = true
		allowed, err := userMay(ctx, c, u, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: ref.resource, Name: ref.name})
		if err != nil {
			return nil, err
		}
		if !allowed {
			errs = append(errs, field.Forbidden(ref.field, fmt.Sprintf(
				"%s may not get %s %q in namespace %s, so %s; "+
					"name one they may read, or ask an admin of the namespace", u.Username, strings.TrimSuffix(ref.resource, "s"), ref.name, namespace, consequence)))
		}
	}
	return errs, nil
}
