package runnerset

import (
	"context"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/github"
)

// loadCredentials reads the set's address and credentials Secret.
func (r *Reconciler) loadCredentials(ctx context.Context, s *setScope) (bool, error) {
	scope, err := github.ParseScope(s.Set.Spec.GitHub.URL)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonInvalidGitHubURL, Message: "spec.github.url: " + err.Error()}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	s.Target = scope
	key := types.NamespacedName{Namespace: s.Set.Namespace, Name: s.Set.Spec.GitHub.CredentialsSecretName}
	sec, err := r.creds.Get(ctx, r.APIReader, r.now(), key)
	if err != nil {
		switch {
		case apierrors.IsNotFound(err):
			s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid,
				Message: fmt.Sprintf("spec.github.credentialsSecretName: Secret %s does not exist; create it (docs/github-actions.md)", key)}
		case apierrors.IsForbidden(err):
			s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
				"spec.github.credentialsSecretName: the operator may not read Secrets in namespace %s; bind the ClusterRole "+
					"macvirt-bootstrap-source-reader to its service account there (docs/github-actions.md): %v", s.Set.Namespace, err)}
		default:
			return false, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	creds, err := github.CredentialsFromSecret(sec)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: err.Error()}
		r.Listeners.Stop(s.Key)
		return true, nil
	}
	s.Credentials = &creds
	return true, nil
}

// claimScaleSet refuses the scale set to a set when an older set of the
// cluster names the same one (the same organisation or repository, runner
// group and name): two listeners would take turns at its session and each
// would remove the other's runners from GitHub as orphans.
func (r *Reconciler) claimScaleSet(ctx context.Context, s *setScope) (bool, error) {
	if s.Blocked != nil {
		return true, nil
	}
	var sets macvirtv1alpha1.MacRunnerSetList
	if err := r.List(ctx, &sets); err != nil {
		return false, fmt.Errorf("listing runner sets: %w", err)
	}
	if other := firstHolder(s.Set, s.Target, sets.Items); other != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonScaleSetInUse, Message: fmt.Sprintf(
			"MacRunnerSet %s/%s, older, uses scale set %q of %s already; give this set another scaleSetName or runnerGroup",
			other.Namespace, other.Name, s.Set.EffectiveScaleSetName(), s.Set.Spec.GitHub.URL)}
		r.Listeners.Stop(s.Key)
	}
	return true, nil
}

// firstHolder is the oldest other set naming set's scale set, if it is
// older than set (by creation, then by namespace and name).
func firstHolder(set *macvirtv1alpha1.MacRunnerSet, scope github.Scope, sets []macvirtv1alpha1.MacRunnerSet) *macvirtv1alpha1.MacRunnerSet {
	key := func(s *macvirtv1alpha1.MacRunnerSet, sc github.Scope) string {
		group := s.Spec.GitHub.RunnerGroup
		if group == "" {
			group = "default"
		}
		return strings.ToLower(sc.Host + "/" + sc.Owner + "/" + sc.Repo + "/" + group + "/" + s.EffectiveScaleSetName())
	}
	mine := key(set, scope)
	older := func(a, b *macvirtv1alpha1.MacRunnerSet) bool {
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	}
	var first *macvirtv1alpha1.MacRunnerSet
	for i := range sets {
		o := &sets[i]
		if o.UID == set.UID || !o.DeletionTimestamp.IsZero() {
			continue
		}
		sc, err := github.ParseScope(o.Spec.GitHub.URL)
		if err != nil || key(o, sc) != mine || !older(o, set) {
			continue
		}
		if first == nil || older(o, first) {
			first = o
		}
	}
	return first
}

// ensureListener runs the set's listener with its current configuration.
func (r *Reconciler) ensureListener(_ context.Context, s *setScope) (bool, error) {
	if s.Credentials != nil && s.Blocked == nil {
		spec := s.Set.Spec
		labels := append([]string(nil), spec.Labels...)
		sort.Strings(labels)
		r.Listeners.Recall(s.Key, s.Set.Status.MessageSessionID)
		r.Listeners.Ensure(s.Key, ListenerConfig{Scope: s.Target, Credentials: *s.Credentials, ScaleSetName: s.Set.EffectiveScaleSetName(),
			RunnerGroup: spec.GitHub.RunnerGroup, Labels: labels, MaxRunners: int(spec.MaxRunners)})
	}
	s.Demand = r.Listeners.Demand(s.Key)
	return true, nil
}

// listClaims reads the set's runners' claims.
func (r *Reconciler) listClaims(ctx context.Context, s *setScope) (bool, error) {
	return r.engine().ListClaims(ctx, &s.Scope)
}
