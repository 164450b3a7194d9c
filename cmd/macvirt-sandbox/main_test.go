package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// sandboxEnv points the sandbox at the envtest binaries make builds.
func sandboxEnv() []string {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		return nil
	}
	return []string{"KUBEBUILDER_ASSETS=" + filepath.Join(cluster.RepoRoot(), "bin", "envtest")}
}

// TestSandboxUntilReady runs `macvirt-sandbox --until-ready` as the README's
// first command does and expects the sample claim Ready.
func TestSandboxUntilReady(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole sandbox")
	}
	bin := cluster.Build(t)
	start := time.Now()
	p := cluster.StartProcess(t, "", sandboxEnv(), bin, "--until-ready", "--speed", "4", "--timeout", "3m")
	if err := <-p.Exited(); err != nil {
		t.Fatalf("macvirt-sandbox --until-ready failed: %v\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), "claim default/ios-build is Ready") {
		t.Errorf("no Ready line in:\n%s", p.Output())
	}
	t.Logf("sample claim Ready; the sandbox exited after %s", time.Since(start).Round(time.Second))
}

// TestSandboxRunsAGitHubJob runs the walk-through of docs/github-actions.md:
// `macvirt-sandbox --until-ready --github-fake` exits 0 only once a job
// queued on the fake GitHub ran on a warm Mac of the tenant's runner set.
func TestSandboxRunsAGitHubJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole sandbox")
	}
	bin := cluster.Build(t)
	p := cluster.StartProcess(t, "", sandboxEnv(), bin, "--until-ready", "--github-fake", "--speed", "4", "--timeout", "4m")
	if err := <-p.Exited(); err != nil {
		t.Fatalf("macvirt-sandbox --until-ready --github-fake failed: %v\n%s", err, p.Output())
	}
	out := p.Output()
	for _, want := range []string{"github: runner set team-ios/macos listens", "github: queued job", "took the job after", "succeeded on runner macos-"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestSandboxRunsABuildkiteJob runs the walk-through of docs/buildkite.md:
// `macvirt-sandbox --until-ready --buildkite-fake` exits 0 only once a job
// scheduled on the fake Buildkite ran on a warm Mac of the tenant's queue.
func TestSandboxRunsABuildkiteJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole sandbox")
	}
	bin := cluster.Build(t)
	p := cluster.StartProcess(t, "", sandboxEnv(), bin, "--until-ready", "--buildkite-fake", "--speed", "4", "--timeout", "4m")
	if err := <-p.Exited(); err != nil {
		t.Fatalf("macvirt-sandbox --until-ready --buildkite-fake failed: %v\n%s", err, p.Output())
	}
	out := p.Output()
	for _, want := range []string{`buildkite: queue team-ios/macos: stack "macvirt-team-ios-macos-c0281586" polls`, "buildkite: scheduled job",
		"was handed the job and its token after", "finished on agent macos-", `output "hello from macos-`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	t.Logf("the sandbox's Buildkite job:\n%s", grepLines(out, "buildkite: "))
}

// TestSandboxRunsAClaimOnAnAppleSiliconMac runs the sandbox with the
// Virtualization runtime: the pool of the sandbox's Virtualization class
// suspends its six idle Macs, and a claim of the class resumes one, Ready
// on one of its fake Apple-silicon Macs, next to the sample claim on the
// simulated KubeVirt nodes.
func TestSandboxRunsAClaimOnAnAppleSiliconMac(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole sandbox")
	}
	bin := cluster.Build(t)
	p := cluster.StartProcess(t, "", sandboxEnv(), bin, "--until-ready", "--runtime", "vz", "--speed", "4", "--timeout", "4m")
	if err := <-p.Exited(); err != nil {
		t.Fatalf("macvirt-sandbox --until-ready --runtime vz failed: %v\n%s", err, p.Output())
	}
	out := p.Output()
	for _, want := range []string{"claim default/ios-build is Ready", "vz: pool sequoia-arm: 6 idle Macs suspended;",
		"vz: claim default/arm-build Ready after", "resumed on MacHost mac-", "tart VM macvirt-", "macOS 15.5 heartbeating"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	t.Logf("the sandbox's Virtualization claim:\n%s", grepLines(out, "vz: "))
}

// grepLines are out's lines that start with prefix.
func grepLines(out, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) || (b.Len() > 0 && strings.HasPrefix(l, "        ")) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestSandboxServesUntilInterrupted runs the sandbox, lists all four kinds
// through its kubeconfig the way `kubectl get macvirt -A` does (with kubectl
// when installed, else through discovery of the macvirt category), then
// interrupts it and expects a clean exit that removes the kubeconfig.
func TestSandboxServesUntilInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole sandbox")
	}
	bin := cluster.Build(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	p := cluster.StartProcess(t, "", sandboxEnv(), bin, "--speed", "4", "--kubeconfig", kubeconfig)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var c client.Client
	for c == nil {
		if ctx.Err() != nil {
			t.Fatalf("no kubeconfig written:\n%s", p.Output())
		}
		if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			scheme, err := macvirtscheme.New()
			if err != nil {
				t.Fatal(err)
			}
			if c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for {
		claim := &macvirtv1alpha1.MacClaim{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ios-build"}, claim); err == nil &&
			meta.IsStatusConditionTrue(claim.Status.Conditions, macvirtv1alpha1.ConditionReady) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sample claim did not go Ready:\n%s", p.Output())
		case err := <-p.Exited():
			t.Fatalf("the sandbox exited (%v):\n%s", err, p.Output())
		case <-time.After(250 * time.Millisecond):
		}
	}

	kinds := listMacvirt(t, kubeconfig)
	for _, k := range []string{"macclass.macvirt.io/sonoma", "macpool.macvirt.io/ci-sonoma", "macclaim.macvirt.io/ios-build", "macmachine.macvirt.io/ci-sonoma-"} {
		if !strings.Contains(kinds, k) {
			t.Errorf("'get macvirt -A' lacks %s:\n%s", k, kinds)
		}
	}

	p.Stop(t, syscall.SIGINT)
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the kubeconfig of a stopped sandbox is left behind (%v)", err)
	}
}

// listMacvirt is `kubectl get macvirt -A -o name` (kind.group/name lines):
// with kubectl if it is
// installed, otherwise every resource of the macvirt category through
// discovery, listed with a dynamic client.
func listMacvirt(t *testing.T, kubeconfig string) string {
	t.Helper()
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "macvirt", "-A", "-o", "name").CombinedOutput() //nolint:gosec // kubectl on PATH.
		if err != nil {
			t.Fatalf("kubectl get macvirt -A: %v\n%s", err, out)
		}
		return string(out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			for _, cat := range r.Categories {
				if cat != "macvirt" {
					continue
				}
				items, err := dyn.Resource(gv.WithResource(r.Name)).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range items.Items {
					b.WriteString(strings.ToLower(r.Kind) + "." + gv.Group + "/" + it.GetName() + "\n")
				}
			}
		}
	}
	return b.String()
}
