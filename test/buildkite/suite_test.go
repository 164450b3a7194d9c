package buildkite_test

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

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
)

func TestMain(m *testing.M) {
	if code, played := harness.PlayGuestRole(); played {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// The suite's world: macvirt at work with a fake Buildkite, whose
// buildkite-agent (this test binary, in its role) is in every guest's
// golden image, and a class for CI whose Macs heartbeat every 5 s.
var (
	world *harness.World
	admin client.Client
	bk    *fakebuildkite.Server
	ctx   context.Context
)

// The cluster agent token the fake Buildkite accepts, and its queue.
const (
	agentToken = "bkct_macvirt_test" //nolint:gosec // the fake Buildkite's, not a credential.
	queueKey   = "macos"
)

func TestBuildkite(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Buildkite Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	world = harness.ForTest(GinkgoT(), harness.Options{Log: GinkgoWriter,
		System:    &harness.SystemOptions{Speed: 4, BuildkitePoll: time.Second},
		Buildkite: &harness.BuildkiteOptions{Token: agentToken, Queue: queueKey},
		Samples:   &harness.SampleOptions{}, CIClass: true})
	admin, bk, ctx = world.Admin, world.Buildkite, world.Ctx
})

// ciClass is the queues' class.
const ciClass = harness.CIClass

// team makes a namespace for one spec with the token Secret, as an admin
// of a team would.
func team(name, token string) string {
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "buildkite"},
		StringData: map[string]string{macvirtv1alpha1.BuildkiteTokenKey: token}})).To(Succeed())
	return name
}
