// Package github_test runs macvirt's GitHub Actions runner sets end to end:
// the operator with its webhooks against the KubeVirt and CDI simulator,
// whose guests run GitHub's runner as a fake (each guest's golden image
// carries a run.sh that plays the actions runner), and a fake GitHub
// driven by GitHub's own Go clients. No test reaches github.com.
package github_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

func TestMain(m *testing.M) {
	if code, played := harness.PlayGuestRole(); played {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// The suite's world: macvirt at work with a fake GitHub, whose runner
// (this test binary, in its role) is in every guest's golden image beside
// a runner that never comes online, and a class for CI whose Macs
// heartbeat every 5 s (docs/github-actions.md).
var (
	world  *harness.World
	admin  client.Client
	system *harness.System
	gh     *fakegithub.Server
	ctx    context.Context
)

// The token the fake GitHub accepts, and the namespace of the teams.
const token = "github_pat_macvirt_test" //nolint:gosec // the fake GitHub's, not a credential.

func TestGitHub(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "GitHub Actions Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	hang := "#!/bin/sh\n# a runner that never comes online\nexec sleep 3600\n"
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter,
		System: &harness.SystemOptions{Speed: 4,
			GuestFiles: map[string]simulator.GuestFile{"Users/admin/hung-runner/run.sh": {Mode: 0o755, Content: []byte(hang)}},
			RunnerSets: operator.RunnerSetOptions{Client: github.Options{RetryMax: 1, RetryWaitMax: 200 * time.Millisecond, Timeout: 20 * time.Second},
				Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, Resync: 2 * time.Second}},
		GitHub:  &fakegithub.Options{Tokens: []string{token}, PollWait: time.Second, SessionTTL: sessionTTL, LostRunnerGrace: 2 * time.Second},
		Samples: &harness.SampleOptions{}, CIClass: true})
	admin, system, gh, ctx = world.Admin, world.System, world.GitHub, world.Ctx
})

// ciClass is the runner sets' class.
const ciClass = harness.CIClass

// team makes a namespace for one spec with the credentials Secret and the
// binding that lets the operator read it, as an admin of a team would.
func team(name string) string {
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "github"},
		StringData: map[string]string{"token": token}})).To(Succeed())
	return name
}
