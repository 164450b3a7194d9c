// Package cluster is the test cluster: envtest's real kube-apiserver and
// etcd carrying macvirt's CRDs and KubeVirt's and CDI's full CRDs, with the
// binaries built by `make envtest` unless KUBEBUILDER_ASSETS points
// elsewhere, and, with StartWithKubeVirt, KubeVirt's own virt-api and
// virt-controller as processes beside them. Every test that needs an API
// server starts it through this package (the suites through test/harness);
// it also finds the repository and builds and starts its binaries.
package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot is the repository root, found from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// New returns an environment with every CRD macvirt's tests need.
func New(scheme *kruntime.Scheme) *envtest.Environment {
	root := RepoRoot()
	env := &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join(root, "config", "crd", "bases"),
			filepath.Join(root, "test", "crds"),
		},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		env.BinaryAssetsDirectory = filepath.Join(root, "bin", "envtest")
	}
	// Every bound claim gets a Service, and envtest deletes no namespace's
	// contents (there is no namespace controller): the default /24 of
	// cluster IPs runs out in one suite. kubeadm's default range instead.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.96.0.0/12")
	return env
}

// Start starts an environment from New, explaining how to get the binaries
// when they are missing.
func Start(scheme *kruntime.Scheme) (*envtest.Environment, *rest.Config, error) {
	env := New(scheme)
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, MissingBinariesHint(err)
	}
	return env, cfg, nil
}

// MissingBinariesHint explains how to get the envtest binaries.
func MissingBinariesHint(err error) error {
	return fmt.Errorf("starting envtest (run 'make envtest' to build bin/envtest, or set KUBEBUILDER_ASSETS): %w", err)
}

// KustomizeBuild runs `kustomize build dir` with the kustomize the Makefile
// installs (`make test` depends on it); a relative dir is taken from the
// repository's root. Errors carry kustomize's own message, or say how to
// install it.
func KustomizeBuild(dir string) ([]byte, error) {
	bin := filepath.Join(RepoRoot(), "bin", "kustomize")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w; run `make kustomize`", err)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(RepoRoot(), dir)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", dir) //nolint:gosec // the repository's own kustomize.
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w\n%s", dir, err, stderr.String())
	}
	return out, nil
}

// DynamicClientOptions are client options with scheme and a RESTMapper
// that discovers kinds as they are served, for tests that install CRDs
// while they run.
func DynamicClientOptions(cfg *rest.Config, scheme *kruntime.Scheme) (*client.Options, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	m, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &client.Options{Scheme: scheme, Mapper: m}, nil
}

// Skipper is what NeedsAPIServer needs of a test: a *testing.T, or a
// Ginkgo suite's GinkgoT().
type Skipper interface {
	Helper()
	Skip(args ...any)
}

// NeedsAPIServer skips t in the unit run (go test -short, make test-unit),
// which starts no API server; make test runs it.
func NeedsAPIServer(t Skipper) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server: make test runs it, make test-unit (-short) does not")
	}
}
