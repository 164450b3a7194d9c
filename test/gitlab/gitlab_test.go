// Package gitlab_test runs macvirt's fleeting plugin as GitLab Runner runs
// it: the plugin binary, built here, started and driven by GitLab's own
// fleeting library and plugin test harness, against the whole system (a
// real API server, the operator, and the simulated KubeVirt with its
// guests' sshd). The plugin holds the runner's kubeconfig: the shipped
// macvirt-fleeting-plugin role in one namespace, nothing more.
package gitlab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting"
	"gitlab.com/gitlab-org/fleeting/fleeting/integration"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/gitlab"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakegitlabrunner"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// runnerPod is the labels of the pod gitlab-runner runs in, in the claims'
// namespace, for the direct route.
var runnerPod = map[string]string{"app.kubernetes.io/name": "gitlab-runner"}

func TestGitLabRunnerGetsAFreshMacPerJob(t *testing.T) {
	cluster.NeedsAPIServer(t)
	world := harness.ForTest(t, harness.Options{Log: io.Discard, System: &harness.SystemOptions{Speed: 4, Network: true},
		Samples: &harness.SampleOptions{}, Tenant: true})
	ctx, scheme, admin, sys := world.Ctx, world.Scheme, world.Admin, world.System
	// The plugin's own identity: macvirt-fleeting-plugin in the claims'
	// namespace, bound as docs/gitlab.md binds it, and nothing else.
	const runnerUser = "gitlab-runner"
	if err := admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gitlab-runner-claims", Namespace: harness.TenantNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: installPluginRole(ctx, t, admin)},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: runnerUser}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "gitlab-runner.kubeconfig")
	if err := harness.WriteTenantKubeconfig(world.Cluster.Environment, runnerUser, harness.TenantNamespace, kubeconfig); err != nil {
		t.Fatal(err)
	}
	runnerCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := client.New(runnerCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.List(ctx, &macvirtv1alpha1.MacClaimList{}, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Fatalf("the plugin's user listing MacClaims of another namespace: %v; want Forbidden", err)
	}
	if err := runner.List(ctx, &corev1.SecretList{}, client.InNamespace(harness.TenantNamespace)); !apierrors.IsForbidden(err) {
		t.Fatalf("the plugin's user listing Secrets: %v; want Forbidden", err)
	}
	if err := runner.List(ctx, &macvirtv1alpha1.MacClassList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the plugin's user listing MacClasses: %v; want Forbidden", err)
	}
	plugin := buildPlugin(t, dir)

	t.Run("GitLab's own plugin harness: up to three, down to one, a command over SSH, down to none", func(t *testing.T) {
		integration.TestProvisioning(t, plugin, integration.Config{
			PluginConfig: gitlab.Config{Name: "harness", Kubeconfig: kubeconfig, Class: harness.TenantClass, Via: gitlab.ViaTunnel, MaxSize: 3},
			// The claims' user: the plugin fills it in from each claim.
			ConnectorConfig: provider.ConnectorConfig{Timeout: 2 * time.Minute},
			MaxInstances:    3,
			UseExternalAddr: true,
		})
		expectNothingLeft(ctx, t, admin, "harness")
	})

	t.Run("a burst of 10 jobs on at most 3 Macs: a fresh Mac per job, nothing left after", func(t *testing.T) {
		const group, jobs, macs = "burst", 10, 3
		claims := watchClaims(ctx, t, admin, group)
		var log strings.Builder
		var logMu sync.Mutex
		report, err := fakegitlabrunner.Run(ctx, fakegitlabrunner.Options{
			Plugin:       plugin,
			PluginConfig: gitlab.Config{Name: group, Kubeconfig: kubeconfig, Class: harness.TenantClass, Via: gitlab.ViaDirect},
			Connector:    provider.ConnectorConfig{Timeout: 2 * time.Minute},
			MaxInstances: macs,
			Jobs:         jobs,
			// gitlab-runner in a pod of the claims' namespace, which the
			// Macs' NetworkPolicy admits.
			Dial: func(ctx context.Context, _, address string) (net.Conn, error) {
				return sys.Simulator.DialFrom(ctx, simulator.Peer{Namespace: harness.TenantNamespace, Labels: runnerPod}, address)
			},
			JobTimeout: 8 * time.Minute,
			Log:        writerFunc(func(p []byte) { logMu.Lock(); log.Write(p); logMu.Unlock() }),
		})
		if err != nil {
			logMu.Lock()
			t.Log(log.String())
			logMu.Unlock()
			t.Fatalf("the burst: %v", err)
		}
		instances := map[string]int{}
		hosts := map[string]int{}
		for _, j := range report.Jobs {
			t.Logf("job %d on %s (%s@%s): waited %s, ran %s\n%s", j.N, j.Instance, j.User, j.Address,
				j.Waited.Round(time.Millisecond), j.Ran.Round(time.Millisecond), j.Output)
			instances[j.Instance]++
			hosts[lastLine(j.Output)]++
			if !strings.Contains(j.Output, "cat: job.txt: No such file or directory") || !strings.Contains(j.Output, fmt.Sprintf("job %d\n", j.N)) {
				t.Errorf("job %d did not find a fresh Mac and leave its file: %q", j.N, j.Output)
			}
		}
		if len(instances) != jobs || len(hosts) != jobs {
			t.Errorf("%d jobs ran on %d instances and %d Macs (host names %v); want one fresh Mac each", jobs, len(instances), len(hosts), hosts)
		}
		if report.MostInstances > macs {
			t.Errorf("the runner knew %d instances at once; its max_instances is %d", report.MostInstances, macs)
		}
		expectNothingLeft(ctx, t, admin, group)
		if n := claims.Peaks().All; n > macs || n == 0 {
			t.Errorf("the API server held %d claims of the group at once; want 1 to %d", n, macs)
		} else {
			t.Logf("at most %d claims of the group at once; %d jobs on %d Macs", n, jobs, len(hosts))
		}
	})

	t.Run("a plugin started while an earlier one still runs leaves that one's Macs alone, and releases them once it is gone", func(t *testing.T) {
		const group = "rolling"
		config := gitlab.Config{Name: group, Kubeconfig: kubeconfig, Class: harness.TenantClass, Via: gitlab.ViaTunnel}
		raw, err := json.Marshal(config)
		if err != nil {
			t.Fatal(err)
		}
		first, prov1 := startPlugin(ctx, t, plugin, raw)
		prov1.Request(2)
		for deadline := time.Now().Add(time.Minute); len(prov1.Instances()) < 2; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the first plugin has %d instances, want 2", len(prov1.Instances()))
			}
		}
		firsts := &macvirtv1alpha1.MacClaimList{}
		if err := admin.List(ctx, firsts, client.InNamespace(harness.TenantNamespace), client.MatchingLabels{gitlab.LabelGroup: group}); err != nil || len(firsts.Items) != 2 {
			t.Fatalf("the first plugin's claims: %d, %v; want 2", len(firsts.Items), err)
		}

		_, prov2 := startPlugin(ctx, t, plugin, raw, quickUpdates...)
		// The second updates every half second: the first's Macs, maybe
		// running jobs, stay the first's.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			for _, c := range firsts.Items {
				got := &macvirtv1alpha1.MacClaim{}
				if err := admin.Get(ctx, client.ObjectKeyFromObject(&c), got); err != nil || got.DeletionTimestamp != nil {
					t.Fatalf("while the first plugin runs, the second released its claim %s (%v)", c.Name, err)
				}
			}
			if n := len(prov2.Instances()); n != 0 {
				t.Fatalf("the second plugin reports %d instances of the first's", n)
			}
		}

		killed := time.Now()
		first.Kill() // no Shutdown: its Lease lapses
		for _, c := range firsts.Items {
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
				got := &macvirtv1alpha1.MacClaim{}
				err := admin.Get(ctx, client.ObjectKeyFromObject(&c), got)
				if apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dead first plugin's claim %s was not released (%v)", c.Name, err)
				}
			}
		}
		t.Logf("the first plugin's claims released %s after it died", time.Since(killed).Round(time.Second))
		prov2.Shutdown(ctx)
		expectNothingLeft(ctx, t, admin, group)
	})

	t.Run("a runner that crashed leaves nothing: the next plugin releases the Macs it cannot log in to", func(t *testing.T) {
		const group = "crash"
		config := gitlab.Config{Name: group, Kubeconfig: kubeconfig, Class: harness.TenantClass, Via: gitlab.ViaTunnel}
		raw, err := json.Marshal(config)
		if err != nil {
			t.Fatal(err)
		}
		first, prov := startPlugin(ctx, t, plugin, raw)
		prov.Request(2)
		deadline := time.Now().Add(time.Minute)
		for len(prov.Instances()) < 2 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		// The runner dies: no Shutdown, no Decrease; the claims stay.
		first.Kill()
		left := &macvirtv1alpha1.MacClaimList{}
		if err := admin.List(ctx, left, client.InNamespace(harness.TenantNamespace), client.MatchingLabels{gitlab.LabelGroup: group}); err != nil || len(left.Items) != 2 {
			t.Fatalf("after the crash: %d claims, %v; want the 2 the dead runner made", len(left.Items), err)
		}
		report, err := fakegitlabrunner.Run(ctx, fakegitlabrunner.Options{Plugin: plugin, PluginConfig: config,
			Connector: provider.ConnectorConfig{Timeout: 2 * time.Minute}, MaxInstances: 2, Jobs: 1, JobTimeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("the next runner's job: %v", err)
		}
		for _, c := range left.Items {
			if report.Jobs[0].Instance == c.Name {
				t.Errorf("the job ran on %s, a Mac of the dead runner", c.Name)
			}
		}
		// The dead runner's Lease, no longer renewed, lapses a minute after
		// a running plugin of its name first saw it: that one releases its
		// Macs then.
		_, prov = startPlugin(ctx, t, plugin, raw, quickUpdates...)
		expectNothingLeft(ctx, t, admin, group)
		prov.Shutdown(ctx)
	})
}

// installPluginRole installs the shipped macvirt-fleeting-plugin role as
// config/rbac has it, and returns its name.
func installPluginRole(ctx context.Context, t *testing.T, admin client.Client) string {
	t.Helper()
	objs, err := harness.ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", "fleeting_plugin_role.yaml"), admin.Scheme())
	if err != nil || len(objs) != 1 {
		t.Fatalf("config/rbac/fleeting_plugin_role.yaml: %d objects, %v; want the role", len(objs), err)
	}
	if err := admin.Create(ctx, objs[0]); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return objs[0].GetName()
}

// buildPlugin builds the plugin binary as a release would.
func buildPlugin(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "fleeting-plugin-macvirt")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/fleeting-plugin-macvirt") //nolint:gosec // the test's own temporary path.
	cmd.Dir = cluster.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, b)
	}
	return out
}

// startPlugin runs the plugin built at path with raw as its config and a
// provisioner of at most two instances over it, as gitlab-runner would;
// the plugin's process is killed when t ends, if the test has not killed
// it first.
func startPlugin(ctx context.Context, t *testing.T, path string, raw []byte, opts ...fleeting.Option) (*fleeting.Runner, *fleeting.Provisioner) {
	t.Helper()
	run, err := fleeting.RunPlugin(path, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Kill)
	prov, err := fleeting.Init(ctx, hclog.NewNullLogger(), run.InstanceGroup(), append([]fleeting.Option{fleeting.WithMaxSize(2)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return run, prov
}

// quickUpdates make a provisioner ask the plugin for its instances every
// half second (every 200 ms while it expects a change), where fleeting's
// default is a minute.
var quickUpdates = []fleeting.Option{fleeting.WithUpdateInterval(500 * time.Millisecond), fleeting.WithUpdateIntervalWhenExpecting(200 * time.Millisecond)}

// watchClaims follows the group's claims until the test ends.
func watchClaims(ctx context.Context, t *testing.T, admin client.WithWatch, group string) *harness.ClaimWatch {
	t.Helper()
	cw, err := harness.WatchClaims(ctx, admin, harness.TenantNamespace, map[string]string{gitlab.LabelGroup: group})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cw.Stop)
	return cw
}

// expectNothingLeft waits until the group has no claims and no machine is
// bound to one.
func expectNothingLeft(ctx context.Context, t *testing.T, admin client.Client, group string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		claims := &macvirtv1alpha1.MacClaimList{}
		machines := &macvirtv1alpha1.MacMachineList{}
		if err := admin.List(ctx, claims, client.InNamespace(harness.TenantNamespace), client.MatchingLabels{gitlab.LabelGroup: group}); err != nil {
			t.Fatal(err)
		}
		if err := admin.List(ctx, machines); err != nil {
			t.Fatal(err)
		}
		var bound []string
		for _, m := range machines.Items {
			if ref := m.Spec.ClaimRef; ref != nil && ref.Namespace == harness.TenantNamespace && strings.HasPrefix(ref.Name, group+"-") {
				bound = append(bound, m.Name+" for "+ref.Name)
			}
		}
		if len(claims.Items) == 0 && len(bound) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var names []string
			for _, c := range claims.Items {
				names = append(names, fmt.Sprintf("%s (%s, deleting %v)", c.Name, c.Status.Phase, c.DeletionTimestamp != nil))
			}
			t.Fatalf("left after the jobs: claims %v, machines %v", names, bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
