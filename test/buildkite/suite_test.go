package buildkite_test

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
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
	"github.com/macvirt/macvirt/test/sandbox"
)

// fakeAgentArg makes this test binary play buildkite-agent: the guests'
// bin/buildkite-agent execs it with this first argument.
const fakeAgentArg = "macvirt-fake-buildkite-agent"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == fakeAgentArg {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := fakebuildkite.AgentMain(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
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
	bk          *fakebuildkite.Server
	stopAll     context.CancelFunc
	ctx         context.Context
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

	bk = fakebuildkite.New(agentToken, queueKey)
	self, err := os.Executable()
	Expect(err).NotTo(HaveOccurred())
	agent := fmt.Sprintf("#!/bin/sh\nexec '%s' %s \"$@\"\n", self, fakeAgentArg)
	system, err = sandbox.StartSystem(ctx, cfg, scheme, sandbox.SystemOptions{Options: sandbox.Options{Speed: 4},
		GuestFiles:    map[string]simulator.GuestFile{"Users/admin/bin/buildkite-agent": {Mode: 0o755, Content: []byte(agent)}},
		BuildkitePoll: time.Second})
	Expect(err).NotTo(HaveOccurred())
	Expect(sandbox.ApplySamples(ctx, admin, 0)).To(Succeed())

	By("a class for CI: the sample class, its Macs heartbeating every 5 s")
	Expect(sandbox.ApplyCIClass(ctx, admin)).To(Succeed())
})

// ciClass is the queues' class.
const ciClass = sandbox.CIClass

var _ = AfterSuite(func() {
	if stopAll != nil {
		stopAll()
	}
	if system != nil {
		system.Stop()
	}
	if bk != nil {
		bk.Close()
	}
	if testCluster != nil {
		Expect(testCluster.Stop()).To(Succeed())
	}
})

// team makes a namespace for one spec with the token Secret, as an admin
// of a team would.
func team(name, token string) string {
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "buildkite"},
		StringData: map[string]string{macvirtv1alpha1.BuildkiteTokenKey: token}})).To(Succeed())
	return name
}
