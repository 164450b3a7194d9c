// Package sandbox runs the whole of macvirt on one machine: a real API
// server and etcd (the envtest binaries) with macvirt's, KubeVirt's and
// CDI's CRDs; the operator with its admission webhooks served over TLS and
// registered with that API server, and its guest-agent endpoint; and the
// KubeVirt/CDI simulator, whose simulated macOS guests speak the real
// guest-agent protocol. It applies config/samples and shows progress.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// Options configure a sandbox.
type Options struct {
	// UntilReady returns once the sample claim is Ready (or Timeout passed).
	UntilReady bool
	// Timeout bounds UntilReady.
	Timeout time.Duration
	// Machines is the sample pool's idle target.
	Machines int32
	// AppleNodes is the number of simulated Apple-hardware nodes, each
	// advertising the licence's two macOS slots, that VMs are scheduled onto
	// by slots (simulator.Options.Nodes). Zero: one node with room for every
	// VM. Run picks enough for the samples and a few claims when it is zero.
	AppleNodes int
	// Speed scales simulated time: 2 makes imports and boots twice as fast.
	Speed float64
	// Realistic gives the simulator a real cluster's timings and jitter
	// (minutes-long imports with progress every 2 s, a 15 s start, a
	// minute-long boot), still scaled by Speed. virt-controller's own
	// crash-loop backoff runs on its clock, whatever the speed.
	Realistic bool
	// Seed seeds the realistic jitter; the same seed repeats a run's timings.
	Seed int64
	// Kubeconfig is where to write the kubeconfig; a temporary file if empty.
	Kubeconfig string
	// TenantKubeconfig is where to write the tenant's kubeconfig (user
	// TenantUser, namespace harness.TenantNamespace); a temporary file if empty.
	TenantKubeconfig string
	// Out receives progress; Live redraws a table in place (a terminal).
	Out  io.Writer
	Live bool
	// GitHubFake runs a fake GitHub and a runner set of the tenant's
	// against it, and runs one job on a warm Mac (docs/github-actions.md);
	// with UntilReady, the sandbox also waits for that job's success.
	// RunnerCommand is the program the guests' CI agents exec in their
	// role (harness.PlayGuestRole): the sandbox's own binary.
	GitHubFake    bool
	RunnerCommand string
	// BuildkiteFake runs a fake Buildkite and a Buildkite queue of the
	// tenant's against it, and runs one job on a warm Mac
	// (docs/buildkite.md); with UntilReady, the sandbox also waits for
	// that job's end.
	BuildkiteFake bool
	// Runtime "vz" adds two fake Apple-silicon Macs (MacHosts with host
	// agents driving a fake tart), a Virtualization class and a claim of
	// it, next to the simulated KubeVirt nodes; with UntilReady, the
	// sandbox also waits for that claim to be Ready.
	Runtime string
}

// RuntimeVZ is Options.Runtime for the Virtualization runtime.
const RuntimeVZ = "vz"

// sampleClaim is the claim of config/samples the sandbox waits for.
var sampleClaim = types.NamespacedName{Namespace: "default", Name: "ios-build"}

// Run runs the sandbox until ctx ends (or, with UntilReady, the sample
// claim is Ready), then stops everything it started and removes its files.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	start := time.Now()
	tmp, err := os.MkdirTemp("", "macvirt-sandbox-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	if opts.AppleNodes == 0 {
		// The sample pool, the sample claim's machine (which the pool
		// replaces) and three on-demand claims, two slots a node.
		opts.AppleNodes = max(2, (int(opts.Machines)+1+3+1)/2)
	}
	world := harness.Options{
		System:  &harness.SystemOptions{Speed: opts.Speed, Realistic: opts.Realistic, Seed: opts.Seed, AppleNodes: opts.AppleNodes, Network: true},
		Samples: &harness.SampleOptions{Machines: opts.Machines}, Tenant: true, GuestCommand: opts.RunnerCommand,
	}
	if (opts.GitHubFake || opts.BuildkiteFake) && opts.RunnerCommand == "" {
		return errors.New("the fake GitHub and Buildkite need RunnerCommand, the program guests run as their CI agents")
	}
	if opts.GitHubFake {
		world.GitHub = &fakegithub.Options{Tokens: []string{githubFakeToken}}
	}
	if opts.BuildkiteFake {
		world.Buildkite = &harness.BuildkiteOptions{Token: buildkiteFakeToken, Queue: buildkiteFakeQueue}
	}
	_, _ = fmt.Fprintln(opts.Out, "starting the API server, etcd, KubeVirt's virt-api and virt-controller, the simulator and macvirt ...")
	if opts.Realistic {
		_, _ = fmt.Fprintf(opts.Out, "realistic timings (--seed %d repeats them)\n", opts.Seed)
	}
	w, err := harness.Start(ctx, world)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	runCtx, c := w.Ctx, w.Admin
	kubeconfig, err := writeKubeconfig(w.Cluster.Environment, opts.Kubeconfig, tmp)
	if err != nil {
		return err
	}
	if opts.Kubeconfig != "" {
		defer func() { _ = os.Remove(kubeconfig) }()
	}
	tenant := opts.TenantKubeconfig
	if tenant == "" {
		tenant = filepath.Join(tmp, "tenant.kubeconfig")
	} else {
		defer func() { _ = os.Remove(tenant) }()
	}
	if err := harness.WriteTenantKubeconfig(w.Cluster.Environment, harness.TenantUser, harness.TenantNamespace, tenant); err != nil {
		return err
	}
	jobDone := make(chan error, 3)
	if opts.Runtime == RuntimeVZ {
		macs, err := harness.StartMacs(runCtx, w.Config, c, harness.MacsOptions{Names: VZMacs, Labels: map[string]string{vzHostLabel: "true"},
			Images: []string{VZImage}, Dir: filepath.Join(tmp, "macs"), Endpoint: w.System.AgentEndpoint, CABundle: w.System.CABundle,
			GuestFiles: w.Simulator.GuestFiles()})
		if err != nil {
			return fmt.Errorf("starting the fake Macs: %w", err)
		}
		defer macs.Stop()
		if err := ApplyVZClass(runCtx, c); err != nil {
			return err
		}
		go func() {
			err := runVZClaim(runCtx, c, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "vz: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	if bk := w.Buildkite; bk != nil {
		if err := ApplyBuildkiteQueue(runCtx, c, bk.URL()); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(opts.Out, "fake Buildkite at %s: queue %s (kubectl get macbuildkitequeue -n %s)\n", bk.URL(), sandboxQueue, sandboxQueue.Namespace)
		go func() {
			err := runFakeBuildkiteJob(runCtx, c, bk, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "buildkite: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	if gh := w.GitHub; gh != nil {
		if err := ApplyRunnerSet(runCtx, c, gh.URL()); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(opts.Out, "fake GitHub at %s: runner set %s (kubectl mac runners -n %s)\n", gh.URL(), sandboxRunnerSet, sandboxRunnerSet.Namespace)
		go func() {
			err := runFakeJob(runCtx, c, gh, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "github: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	_, _ = fmt.Fprintf(opts.Out, "\nsandbox up in %s\n  kubeconfig: %s\n  try: kubectl --kubeconfig %s get macvirt -A\n       kubectl --kubeconfig %s get macclaim ios-build -o yaml\n"+
		"  as tenant %s (namespace %s: the shipped tenant roles only; its Macs through the API server), with kubectl mac (make kubectl-mac puts it in bin/):\n"+
		"       export KUBECONFIG=%s PATH=$PWD/bin:$PATH\n       kubectl mac claim demo --class %s --wait\n       kubectl mac ssh demo -- uname -a\n"+
		"       echo hi | kubectl mac cp - demo:note.txt && kubectl mac cp demo:note.txt -\n       kubectl mac port-forward demo 2222:22 ; kubectl mac vnc demo\n\n",
		time.Since(start).Round(100*time.Millisecond), kubeconfig, kubeconfig, kubeconfig, harness.TenantUser, harness.TenantNamespace, tenant, harness.TenantClass)
	if err := watch(runCtx, c, opts, start); err != nil || !opts.UntilReady {
		return err
	}
	deadline := time.After(max(time.Minute, opts.Timeout-time.Since(start)))
	for range 3 {
		select {
		case err := <-jobDone:
			if err != nil {
				return err
			}
		case <-deadline:
			return errors.New("the fake GitHub's or Buildkite's job, or the Virtualization claim, did not end in time")
		}
	}
	return nil
}

func writeKubeconfig(env *envtest.Environment, path, tmp string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "sandbox-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	if path == "" {
		path = filepath.Join(tmp, "kubeconfig")
	}
	return path, os.WriteFile(path, b, 0o600)
}

// watch shows claims and machines until ctx ends or, with UntilReady, the
// sample claim is Ready.
func watch(ctx context.Context, c client.Client, opts Options, start time.Time) error {
	var deadline <-chan time.Time
	if opts.UntilReady {
		deadline = time.After(opts.Timeout)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		table, ready, why := snapshot(ctx, c)
		if table != last {
			if opts.Live {
				_, _ = fmt.Fprint(opts.Out, "\033[H\033[2J")
			}
			_, _ = fmt.Fprint(opts.Out, table)
			last = table
		}
		if opts.UntilReady && ready {
			_, _ = fmt.Fprintf(opts.Out, "claim %s is Ready, %s after start\n", sampleClaim, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return fmt.Errorf("claim %s not Ready after %s: %s", sampleClaim, opts.Timeout, why)
		case <-tick.C:
		}
	}
}

// snapshot renders claims and machines as a table, and says whether the
// sample claim is Ready and, if not, why.
func snapshot(ctx context.Context, c client.Client) (string, bool, string) {
	var b strings.Builder
	var claims macvirtv1alpha1.MacClaimList
	var machines macvirtv1alpha1.MacMachineList
	if err := c.List(ctx, &claims); err != nil {
		return "", false, err.Error()
	}
	if err := c.List(ctx, &machines); err != nil {
		return "", false, err.Error()
	}
	fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "KIND", "NAMESPACE/NAME", "PHASE", "MESSAGE")
	ready, why := false, "the claim does not exist"
	for _, cl := range claims.Items {
		msg := ""
		if rc := meta.FindStatusCondition(cl.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = rc.Message
			if cl.Namespace == sampleClaim.Namespace && cl.Name == sampleClaim.Name {
				ready, why = rc.Status == metav1.ConditionTrue, rc.Message
			}
		}
		fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "MacClaim", cl.Namespace+"/"+cl.Name, cl.Status.Phase, truncate(msg, 70))
	}
	for _, m := range machines.Items {
		msg := ""
		if rc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = rc.Message
		}
		fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "MacMachine", m.Namespace+"/"+m.Name, m.Status.Phase, truncate(msg, 70))
	}
	return b.String(), ready, why
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
