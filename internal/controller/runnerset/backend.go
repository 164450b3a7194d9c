package runnerset

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

// gitHub is GitHub as the runner core's backend for one reconcile of a
// set: a Mac is handed a just-in-time runner registration, and a runner
// is removed from the scale set.
type gitHub struct {
	r *Reconciler
	s *setScope
	// mu guards what Hand records in s (Demand.Err, Failed): the core
	// hands fresh claims over from several goroutines at once.
	mu *sync.Mutex
}

var _ runnercore.Backend = gitHub{}

// backend is GitHub as the backend of this reconcile of s.
func (r *Reconciler) backend(s *setScope) gitHub { return gitHub{r: r, s: s, mu: &sync.Mutex{}} }

// view is the set as the runner core sees it.
func view(set *macvirtv1alpha1.MacRunnerSet) runnercore.Set {
	return runnercore.Set{Object: set, Kind: "MacRunnerSet", Label: macvirtv1alpha1.LabelRunnerSet,
		System: "GitHub", ServiceErrorReason: "GitHubError",
		ClassName: set.Spec.ClassName, PoolName: set.Spec.PoolName, MaxRunners: set.Spec.MaxRunners, MinIdle: set.Spec.MinIdle,
		JobTimeout: set.Spec.EffectiveJobTimeout(), RegistrationTimeout: set.Spec.EffectiveRegistrationTimeout(),
		OwnedPool: ownedPoolName(set), PoolLabels: map[string]string{
			macvirtv1alpha1.LabelRunnerSet: set.Name, macvirtv1alpha1.LabelRunnerSetNamespace: set.Namespace}}
}

// ownedPoolName is the name of the set's own warm pool (pools are
// cluster-scoped).
func ownedPoolName(set *macvirtv1alpha1.MacRunnerSet) string {
	return "runners-" + set.Namespace + "-" + set.Name
}

// Task runs GitHub's runner with the just-in-time configuration from the
// runner's Secret: one job, then the runner exits and the task with it.
func (g gitHub) Task(name string) macvirtv1alpha1.Bootstrap {
	set := g.s.Set
	return macvirtv1alpha1.Bootstrap{
		Script: &macvirtv1alpha1.BootstrapScript{Inline: runnerScript(set)},
		Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: macvirtv1alpha1.RunnerJITConfigEnv,
			SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: name, Key: macvirtv1alpha1.RunnerJITConfigKey}}},
		User: set.Spec.Runner.User,
	}
}

// Hand registers claim's runner on GitHub and writes its JIT Secret,
// unless the Secret exists already.
func (g gitHub) Hand(ctx context.Context, c *macvirtv1alpha1.MacClaim, fresh bool) (bool, bool, error) {
	if !fresh {
		err := g.r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, &corev1.Secret{})
		if err == nil {
			return true, true, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, false, fmt.Errorf("reading the JIT Secret of claim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	gh := g.s.Demand.Client
	if gh == nil || g.s.Demand.ScaleSetID == 0 {
		return false, true, nil
	}
	jit, err := gh.GenerateJIT(ctx, g.s.Demand.ScaleSetID, c.Name)
	if err != nil {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.r.githubFailed(g.s, gh, err)
		return false, false, nil
	}
	if err := g.r.Create(ctx, jitSecret(c, jit)); err != nil && !apierrors.IsAlreadyExists(err) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.s.Fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("creating the JIT Secret of runner %s: %v", c.Name, err))
		return false, false, fmt.Errorf("creating Secret %s/%s: %w", c.Namespace, c.Name, err)
	}
	return true, true, nil
}

// Unregister removes a released runner from the scale set.
func (g gitHub) Unregister(ctx context.Context, name string) error {
	gh := g.s.Demand.Client
	if gh == nil {
		return nil
	}
	_, err := gh.RemoveRunner(ctx, name)
	return g.answer(gh, err)
}

// Forget removes a runner no claim backs from the scale set.
func (g gitHub) Forget(ctx context.Context, reg runnercore.Registration) (bool, error) {
	gh := g.s.Demand.Client
	gone, err := gh.RemoveScaleSetRunner(ctx, g.s.Demand.ScaleSetID, reg.ID, reg.Name)
	return gone, g.answer(gh, err)
}

// answer is GitHub's error as the core reads it: busy, or recorded.
func (g gitHub) answer(gh *github.Client, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, github.ErrBusy):
		return runnercore.ErrBusy
	}
	g.r.githubFailed(g.s, gh, err)
	return err
}
