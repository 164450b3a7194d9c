// Package github_test runs macvirt's GitHub Actions runner sets end to end:
// the operator with its webhooks against the KubeVirt and CDI simulator,
// whose guests run GitHub's runner as a fake (each guest's golden image
// carries a run.sh that plays the actions runner), and a fake GitHub
// driven by GitHub's own Go clients. No test reaches github.com.
package github_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/operator"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
	"github.com/macvirt/macvirt/test/sandbox"
)

// fakeRunnerArg makes this test binary play GitHub's runner: the guests'
// run.sh execs it with this first argument.
const fakeRunnerArg = "macvirt-fake-runner"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fakeRunnerArg {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := fakegithub.RunnerMain(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

var (
	cfg         *rest.Config
	testCluster *cluster.Cluster
	scheme      *runtime.Scheme
	admin       client.Client
	system      *sandbox.System
	gh          *fakegithub.Server
	stopAll     context.CancelFunc
	ctx         context.Context
)

// The token the fake GitHub accepts, and the namespace of the teams.
const token = "github_pat_macvirt_test" //nolint:gosec // the fake GitHub's, not a credential.

func TestGitHub(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "GitHub Actions Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	var err error
	scheme, err = macvirtscheme.New()
	Expect(err).NotTo(HaveOccurred())
	testCluster, err = sandbox.StartCluster(scheme)
	Expect(err).NotTo(HaveOccurred())
	cfg = testCluster.Config
	admin, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	ctx, stopAll = context.WithCancel(context.Background())

	gh = fakegithub.New(fakegithub.Options{Tokens: []string{token}, PollWait: time.Second, SessionTTL: 15 * time.Second,
		LostRunnerGrace: 2 * time.Second})
	self, err := os.Executable()
	Expect(err).NotTo(HaveOccurred())
	runSh := fmt.Sprintf("#!/bin/sh\nexec '%s' %s \"$@\"\n", self, fakeRunnerArg)
	hang := "#!/bin/sh\n# a runner that never comes online\nexec sleep 3600\n"
	system, err = sandbox.StartSystem(ctx, cfg, scheme, sandbox.SystemOptions{Options: sandbox.Options{Speed: 4},
		GuestFiles: map[string]simulator.GuestFile{
			"Users/admin/actions-runner/run.sh": {Mode: 0o755, Content: []byte(runSh)},
			"Users/admin/hung-runner/run.sh":    {Mode: 0o755, Content: []byte(hang)},
		},
		RunnerSets: operator.RunnerSetOptions{Client: github.Options{RetryMax: 1, RetryWaitMax: 200 * time.Millisecond, Timeout: 20 * time.Second},
			Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, Resync: 2 * time.Second}})
	Expect(err).NotTo(HaveOccurred())
	Expect(sandbox.ApplySamples(ctx, admin, 0)).To(Succeed())

	By("a class for CI: the sample class, its Macs heartbeating every 5 s (docs/github-actions.md)")
	sample := &macvirtv1alpha1.MacClass{}
	Expect(admin.Get(ctx, client.ObjectKey{Name: "sonoma"}, sample)).To(Succeed())
	ci := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: ciClass}, Spec: *sample.Spec.DeepCopy()}
	ci.Spec.Lifecycle.HeartbeatTimeout = &metav1.Duration{Duration: 20 * time.Second}
	Expect(admin.Create(ctx, ci)).To(Succeed())
})

// ciClass is the runner sets' class.
const ciClass = "ci-mac"

var _ = AfterSuite(func() {
	if stopAll != nil {
		stopAll()
	}
	if system != nil {
		system.Stop()
	}
	if gh != nil {
		gh.Close()
	}
	if testCluster != nil {
		Expect(testCluster.Stop()).To(Succeed())
	}
})

// team makes a namespace for one spec with the credentials Secret and the
// binding that lets the operator read it, as an admin of a team would.
func team(name string) string {
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "github"},
		StringData: map[string]string{"token": token}})).To(Succeed())
	return name
}
