package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
)

// The sandbox's Buildkite queue: in the tenant's namespace, from
// harness.CIClass, one warm Mac, at most two agents, on the fake's queue.
var sandboxQueue = types.NamespacedName{Namespace: harness.TenantNamespace, Name: "macos"}

const (
	// buildkiteFakeToken is the cluster agent token the fake accepts.
	buildkiteFakeToken = "bkct_sandbox" //nolint:gosec // the fake Buildkite's, not a credential.
	buildkiteFakeQueue = "macos"
)

// ApplyBuildkiteQueue creates the sandbox's Buildkite queue against the
// fake Buildkite at endpoint, with the Secret of its token and its class.
func ApplyBuildkiteQueue(ctx context.Context, c client.Client, endpoint string) error {
	if err := harness.ApplyCIClass(ctx, c); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxQueue.Namespace, Name: "buildkite"},
		StringData: map[string]string{macvirtv1alpha1.BuildkiteTokenKey: buildkiteFakeToken}}); err != nil {
		return err
	}
	return c.Create(ctx, &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Namespace: sandboxQueue.Namespace, Name: sandboxQueue.Name},
		Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{
			Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: buildkiteFakeQueue, TokenSecretName: "buildkite", Endpoint: endpoint},
			ClassName: harness.CIClass, MaxAgents: 2, MinIdle: 1,
			Agent: macvirtv1alpha1.BuildkiteAgentInstall{Path: harness.BuildkiteAgentPath},
		}})
}

// runFakeBuildkiteJob waits for the queue to poll with a warm Mac,
// schedules one job on the fake Buildkite and follows it to its end,
// saying each step.
func runFakeBuildkiteJob(ctx context.Context, c client.Client, bk *fakebuildkite.Server, out io.Writer) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, "buildkite: "+format+"\n", args...) }
	q := &macvirtv1alpha1.MacBuildkiteQueue{}
	if err := waitWarm(ctx, c, q, sandboxQueue, macvirtv1alpha1.ReasonPolling, func() []metav1.Condition { return q.Status.Conditions },
		func() string { return q.Status.WarmPoolName }); err != nil {
		return fmt.Errorf("queue %s not polling with a warm Mac: %w", sandboxQueue, err)
	}
	say("queue %s: stack %q polls cluster queue %q with a warm Mac in pool %s", sandboxQueue, q.Status.StackKey,
		q.Spec.Buildkite.Queue, q.Status.WarmPoolName)
	scheduled := time.Now()
	id := bk.AddJob(`echo "hello from $BUILDKITE_AGENT_NAME"; sleep 3`)
	say("scheduled job %s", id)
	agent, mac := "", ""
	var job fakebuildkite.Job
	if err := poll(ctx, func() (bool, error) {
		var claims macvirtv1alpha1.MacClaimList
		if err := c.List(ctx, &claims, client.InNamespace(sandboxQueue.Namespace),
			client.MatchingLabels{macvirtv1alpha1.LabelBuildkiteQueue: sandboxQueue.Name}); err != nil {
			return false, err
		}
		for i := range claims.Items {
			cl := &claims.Items[i]
			if agent == "" && cl.Annotations[macvirtv1alpha1.AnnotationBuildkiteJob] != "" && cl.Status.Machine != nil {
				agent, mac = cl.Name, cl.Status.Machine.Name
				say("agent %s (claim %s/%s on Mac %s) was handed the job and its token after %s", agent, cl.Namespace, cl.Name, mac,
					time.Since(scheduled).Round(100*time.Millisecond))
			}
		}
		job, _ = bk.Job(id)
		return job.State == fakebuildkite.StateFinished, nil
	}); err != nil {
		return fmt.Errorf("job %s did not finish: %w", id, err)
	}
	if job.ExitStatus != 0 {
		return fmt.Errorf("job %s exited %d: %s", id, job.ExitStatus, job.Output)
	}
	say("job %s finished on agent %s (exit 0, output %q) after %s; its Mac is released (one job per Mac). Schedule more with:\n"+
		"        curl -X POST %s_fake/jobs -d '{\"command\":\"sw_vers; sleep 20\"}'\n"+
		"        kubectl get macbuildkitequeue -n %s %s -o yaml",
		id, job.Agent, job.Output, time.Since(scheduled).Round(100*time.Millisecond), bk.URL(), sandboxQueue.Namespace, sandboxQueue.Name)
	return nil
}
