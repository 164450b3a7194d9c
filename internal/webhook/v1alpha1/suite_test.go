package v1alpha1

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/devserve"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The suite runs a real kube-apiserver and etcd with macvirt's CRDs, and
// the operator's webhooks served over TLS by the same local mechanism `make run` uses: generated
// certificates, and the configurations generated from the markers pointed
// at this process.
var (
	cfg       *rest.Config
	testEnv   *envtest.Environment
	scheme    *runtime.Scheme
	k8sClient client.Client
	warnings  = &warningRecorder{}
	manifests []byte
	// operatorUser is who the webhooks take for the operator.
	operatorUser string
	suiteCtx     context.Context
	cancelAll    context.CancelFunc
)

func TestWebhooks(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	// Generous: two cores may be busy with other suites.
	SetDefaultEventuallyTimeout(time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	suiteCtx, cancelAll = context.WithCancel(context.Background())
	var err error
	scheme, err = macvirtscheme.New()
	Expect(err).NotTo(HaveOccurred())
	testEnv, cfg, err = cluster.Start(scheme)
	Expect(err).NotTo(HaveOccurred())

	manifests, err = os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "webhook", "manifests.yaml"))
	Expect(err).NotTo(HaveOccurred())
	local, err := devserve.Prepare(devserve.Options{Manifests: manifests})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(local.Close)

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: local.WebhookServer(webhook.Options{}),
	})
	Expect(err).NotTo(HaveOccurred())
	// No controller runs: these specs are about admission. The webhooks look
	// SMBIOS identities up by the operator's cache index.
	Expect(index.Register(suiteCtx, mgr.GetFieldIndexer())).To(Succeed())
	// The manager's user plays the operator: only it may write what binds
	// a machine. Specs play anyone else with impersonated clients.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	operatorUser, err = Identity(suiteCtx, c)
	Expect(err).NotTo(HaveOccurred())
	Expect(Setup(mgr, Options{OperatorUser: operatorUser})).To(Succeed())
	Expect(mgr.Add(&devserve.Registrar{Server: local, Client: mgr.GetClient(),
		Started: func() bool { return mgr.GetWebhookServer().StartedChecker()(nil) == nil }})).To(Succeed())
	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		Expect(mgr.Start(suiteCtx)).To(Succeed())
	}()
	DeferCleanup(func() {
		// A manager stopped before its caches synced (a failed setup) may
		// never return; do not let that hang the run.
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			GinkgoWriter.Println("the manager did not stop within 30s")
		}
	})

	warnCfg := rest.CopyConfig(cfg)
	warnCfg.WarningHandler = warnings
	c, err = client.New(warnCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = client.WithFieldValidation(c, metav1.FieldValidationStrict)

	// The webhooks answer once a pool the CRD accepts is refused by the
	// validating webhook (it is registered after the server listens).
	Eventually(func() string {
		p := minimalPool()
		p.Spec.Namespace = "Not_A_Namespace"
		return errorText(k8sClient.Create(suiteCtx, p, client.DryRunAll))
	}).Should(ContainSubstring(`admission webhook "vmacpool-v1alpha1.macvirt.io" denied the request`))
})

var _ = AfterSuite(func() {
	if cancelAll != nil {
		cancelAll()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// warningRecorder keeps the admission warnings the API server returns.
type warningRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// during returns the warnings received while f ran.
func (w *warningRecorder) during(f func()) []string {
	w.mu.Lock()
	start := len(w.seen)
	w.mu.Unlock()
	f()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen[start:]...)
}

// newNamespace creates a namespace with labels for one spec and deletes it after.
func newNamespace(labels map[string]string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-", Labels: labels}}
	Expect(k8sClient.Create(suiteCtx, ns)).To(Succeed())
	DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), ns) })
	return ns.Name
}

// cleanup deletes a cluster-scoped or namespaced object after the spec.
func cleanup(obj client.Object) {
	DeferCleanup(func() { _ = client.IgnoreNotFound(k8sClient.Delete(context.Background(), obj)) })
}
