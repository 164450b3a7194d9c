package sandbox

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// The sandbox's runner set: in the tenant's namespace, from harness.CIClass,
// one warm Mac, at most two runners.
var sandboxRunnerSet = types.NamespacedName{Namespace: harness.TenantNamespace, Name: "macos"}

// githubFakeToken is the token the sandbox's fake GitHub accepts.
const githubFakeToken = "github_pat_sandbox" //nolint:gosec // the fake GitHub's, not a credential.

// ApplyRunnerSet creates the sandbox's runner set against the fake GitHub
// at url, with the Secret of its token and its class.
func ApplyRunnerSet(ctx context.Context, c client.Client, url string) error {
	if err := harness.ApplyCIClass(ctx, c); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxRunnerSet.Namespace, Name: "github"},
		StringData: map[string]string{macvirtv1alpha1.GitHubTokenKey: githubFakeToken}}); err != nil {
		return err
	}
	return c.Create(ctx, &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxRunnerSet.Namespace, Name: sandboxRunnerSet.Name},
		Spec: macvirtv1alpha1.MacRunnerSetSpec{
			GitHub:    macvirtv1alpha1.GitHubRunnerTarget{URL: strings.TrimSuffix(url, "/") + "/acme", CredentialsSecretName: "github"},
			ClassName: harness.CIClass, MaxRunners: 2, MinIdle: 1,
		}})
}

// runFakeJob waits for the runner set to listen and its warm Mac, queues
// one job on the fake GitHub and follows it to its end, saying each step.
func runFakeJob(ctx context.Context, c client.Client, gh *fakegithub.Server, out io.Writer) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, "github: "+format+"\n", args...) }
	set := &macvirtv1alpha1.MacRunnerSet{}
	if err := waitWarm(ctx, c, set, sandboxRunnerSet, macvirtv1alpha1.ReasonListening, func() []metav1.Condition { return set.Status.Conditions },
		func() string { return set.Status.WarmPoolName }); err != nil {
		return fmt.Errorf("runner set %s not listening with a warm Mac: %w", sandboxRunnerSet, err)
	}
	say("runner set %s listens to scale set %q (id %d) with a warm Mac in pool %s", sandboxRunnerSet, set.EffectiveScaleSetName(),
		set.Status.ScaleSetID, set.Status.WarmPoolName)
	id := gh.QueueJob(fakegithub.Job{Owner: "acme", Repo: "ios-app", Labels: []string{set.EffectiveScaleSetName()},
		DisplayName: "hello-mac", Duration: 3 * time.Second})
	say("queued job %s (runs-on: %s)", id, set.EffectiveScaleSetName())
	var job fakegithub.JobView
	runner := ""
	if err := poll(ctx, func() (bool, error) {
		job, _ = gh.Job(id)
		if job.RunnerName != "" && runner == "" {
			runner = job.RunnerName
			claim := &macvirtv1alpha1.MacClaim{}
			mac := "?"
			if err := c.Get(ctx, types.NamespacedName{Namespace: sandboxRunnerSet.Namespace, Name: runner}, claim); err == nil && claim.Status.Machine != nil {
				mac = claim.Status.Machine.Name
			}
			say("runner %s (claim %s/%s on Mac %s) took the job after %s", runner, sandboxRunnerSet.Namespace, runner, mac,
				job.RunnerAssignTime.Sub(job.ScaleSetAssignTime).Round(100*time.Millisecond))
		}
		return job.State == fakegithub.JobCompleted, nil
	}); err != nil {
		return fmt.Errorf("job %s did not complete: %w", id, err)
	}
	if job.Result != fakegithub.ResultSucceeded {
		return fmt.Errorf("job %s ended %s", id, job.Result)
	}
	say("job %s succeeded on runner %s; its Mac is released (one job per Mac). Queue more with:\n"+
		"        curl -X POST %s/_fake/jobs -d '{\"labels\":[\"%s\"],\"durationSeconds\":30}'\n"+
		"        kubectl mac runners -n %s", id, job.RunnerName, gh.URL(), set.EffectiveScaleSetName(), sandboxRunnerSet.Namespace)
	return nil
}

// waitWarm waits until obj (read at key) is Ready for reason and the warm
// pool it names has an idle Mac; conditions and pool read obj's status.
func waitWarm(ctx context.Context, c client.Client, obj client.Object, key types.NamespacedName, reason string,
	conditions func() []metav1.Condition, pool func() string) error {
	return poll(ctx, func() (bool, error) {
		if err := c.Get(ctx, key, obj); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ready := meta.FindStatusCondition(conditions(), macvirtv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != reason {
			return false, nil
		}
		p := &macvirtv1alpha1.MacPool{}
		if err := c.Get(ctx, types.NamespacedName{Name: pool()}, p); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return p.Status.Idle >= 1, nil
	})
}

// poll calls done every half second until it is true, it fails, or ctx ends.
func poll(ctx context.Context, done func() (bool, error)) error {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
