package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/macvirt/macvirt/internal/localnet"
)

// KubeVirt's install namespace and the service accounts its components run
// as (virt-operator's install strategy names them; the harness impersonates
// them, since virt-api's admission tells its own components apart by their
// user names).
const (
	KubeVirtNamespace     = "kubevirt"
	kubevirtCR            = "kubevirt"
	virtAPIServiceAccount = "kubevirt-apiserver"
	virtControllerAccount = "kubevirt-controller"
	virtAPIService        = "virt-api"
	// The Secrets virt-operator issues the components' certificates into.
	virtAPICertSecret        = "kubevirt-virt-api-certs"     //nolint:gosec // a Secret's name, not a credential.
	virtHandlerClientSecret  = "kubevirt-virt-handler-certs" //nolint:gosec // a Secret's name, not a credential.
	virtControllerCertSecret = "kubevirt-controller-certs"
	subresourcesAPIService   = "v1.subresources.kubevirt.io"
)

// KubeVirtOptions configure KubeVirt's control plane in a test cluster.
type KubeVirtOptions struct {
	// FeatureGates are the KubeVirt CR's feature gates.
	FeatureGates []string
	// DefaultArchitecture is the architecture KubeVirt gives VMs that name
	// none. virt-operator records its own (amd64 here) unless the KubeVirt
	// CR names one; a cluster whose virt-operator runs on an arm64 node
	// records arm64.
	DefaultArchitecture string
	// MacvirtCRDs, when set, are installed in place of config/crd/bases:
	// an earlier release's, for a test of the upgrade from it.
	MacvirtCRDs []*apiextensionsv1.CustomResourceDefinition
}

// Cluster is a test cluster: envtest's API server and etcd, with KubeVirt's
// own control plane (virt-api and virt-controller, built by `make
// kubevirt`) running against it as plain processes.
type Cluster struct {
	*envtest.Environment
	Config *rest.Config

	dir     string
	network *clusterNetwork
	procs   []*controlPlaneProcess
}

type controlPlaneProcess struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// KubeVirtAssets is where `make kubevirt` puts virt-api, virt-controller
// and the install generator, unless KUBEVIRT_ASSETS names another
// directory.
func KubeVirtAssets() string {
	if dir := os.Getenv("KUBEVIRT_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "kubevirt")
}

// StartWithKubeVirt starts a test cluster whose KubeVirt is KubeVirt's own
// code: the CRDs, RBAC, webhook configurations, ValidatingAdmissionPolicies
// and APIServices virt-operator would install, and virt-api and
// virt-controller running as KubeVirt's service accounts. The API server
// reaches virt-api's Service through the cluster network, so admission and
// the subresource API (`stop`, `start`, ...) answer as in a real cluster.
func StartWithKubeVirt(scheme *kruntime.Scheme, opts KubeVirtOptions) (_ *Cluster, err error) {
	c := &Cluster{}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if c.dir, err = os.MkdirTemp("", "macvirt-kubevirt-"); err != nil {
		return nil, err
	}
	manifests := filepath.Join(c.dir, "manifests")
	if err := c.generate(manifests, opts); err != nil {
		return nil, err
	}

	env := New(scheme)
	c.Environment = env
	paths, err := crdPathsWithKubeVirts(filepath.Join(manifests, "crds"))
	if err != nil {
		return nil, err
	}
	if opts.MacvirtCRDs != nil {
		paths = paths[1:]
		env.CRDInstallOptions.CRDs = opts.MacvirtCRDs
	}
	env.CRDDirectoryPaths = paths
	if err := enableAggregation(env, c.dir); err != nil {
		return nil, err
	}
	if c.network, err = newClusterNetwork(); err != nil {
		return nil, err
	}
	egress, err := c.network.egressSelectorConfig()
	if err != nil {
		return nil, err
	}
	env.ControlPlane.GetAPIServer().Configure().Set("egress-selector-config-file", egress)

	if c.Config, err = env.Start(); err != nil {
		return nil, MissingBinariesHint(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	objs, err := ReadObjects(filepath.Join(manifests, "install.yaml"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if err := create(ctx, cl, o); err != nil {
			return nil, fmt.Errorf("installing KubeVirt's %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := c.startVirtAPI(ctx, cl, objs); err != nil {
		return nil, err
	}
	if err := c.startVirtController(objs); err != nil {
		return nil, err
	}
	return c, nil
}

// SetKubeVirtFeatureGates sets the feature gates of the cluster's KubeVirt
// CR, as an administrator would; virt-api and virt-controller follow.
func SetKubeVirtFeatureGates(ctx context.Context, c client.Client, gates ...string) error {
	kv := &unstructured.Unstructured{}
	kv.SetAPIVersion("kubevirt.io/v1")
	kv.SetKind("KubeVirt")
	if err := c.Get(ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: kubevirtCR}, kv); err != nil {
		return fmt.Errorf("reading the KubeVirt CR: %w", err)
	}
	patch := client.MergeFrom(kv.DeepCopy())
	list := make([]any, 0, len(gates))
	for _, g := range gates {
		list = append(list, g)
	}
	if err := unstructured.SetNestedSlice(kv.Object, list, "spec", "configuration", "developerConfiguration", "featureGates"); err != nil {
		return err
	}
	if err := c.Patch(ctx, kv, patch); err != nil {
		return fmt.Errorf("setting KubeVirt's feature gates to %v: %w", gates, err)
	}
	return nil
}

// Stop ends KubeVirt's processes, then the API server and etcd.
func (c *Cluster) Stop() error {
	for _, p := range c.procs {
		if p.cmd.Process != nil { // nil when it never started
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range c.procs {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill() // started: done would be closed otherwise
			<-p.done
		}
	}
	var errs []error
	if c.Environment != nil && c.Config != nil {
		errs = append(errs, c.Environment.Stop())
	}
	if c.network != nil {
		errs = append(errs, c.network.close())
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// KubeVirtLogs is what virt-api and virt-controller printed, for a
// failing test to show.
func (c *Cluster) KubeVirtLogs() string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "==> %s\n%s\n", p.name, p.out.String())
	}
	return b.String()
}

func (c *Cluster) generate(out string, opts KubeVirtOptions) error {
	bin := filepath.Join(KubeVirtAssets(), "install")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("KubeVirt's control plane is not built (run 'make kubevirt', or set KUBEVIRT_ASSETS): %w", err)
	}
	cmd := exec.Command(bin, "-out", out, "-feature-gates", strings.Join(opts.FeatureGates, ","), //nolint:gosec // the repository's own build.
		"-default-architecture", opts.DefaultArchitecture)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("generating KubeVirt's install manifests: %w\n%s", err, stderr.String())
	}
	return nil
}

// crdPathsWithKubeVirts lists the CRDs of New, macvirt's first, but with KubeVirt's own
// (kubevirtCRDs, every kind virt-operator installs) in place of the
// KubeVirt CRDs kept in test/crds.
func crdPathsWithKubeVirts(kubevirtCRDs string) ([]string, error) {
	root := RepoRoot()
	paths := []string{filepath.Join(root, "config", "crd", "bases"), kubevirtCRDs}
	entries, err := os.ReadDir(filepath.Join(root, "test", "crds"))
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), "kubevirt.io_") {
			continue
		}
		paths = append(paths, filepath.Join(root, "test", "crds", e.Name()))
	}
	return paths, nil
}

// create creates o, then writes the status its manifest carries (the
// KubeVirt CR's, as virt-operator reports it), which a create ignores.
func create(ctx context.Context, cl client.Client, o *unstructured.Unstructured) error {
	status, hasStatus := o.Object["status"]
	if err := cl.Create(ctx, o); err != nil {
		return err
	}
	if m, ok := status.(map[string]any); !hasStatus || !ok || len(m) == 0 {
		return nil
	}
	o.Object["status"] = status
	return cl.Status().Update(ctx, o)
}

// ReadObjects reads the objects of a multi-document YAML (or JSON) file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path) //nolint:gosec // a file the test names.
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func secretData(objs []*unstructured.Unstructured, name string) (map[string][]byte, error) {
	for _, o := range objs {
		if o.GetKind() != "Secret" || o.GetName() != name {
			continue
		}
		s := &corev1.Secret{}
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(o.Object, s); err != nil {
			return nil, err
		}
		return s.Data, nil
	}
	return nil, fmt.Errorf("KubeVirt's install manifests have no Secret %s", name)
}

// writeCertificate writes a TLS Secret's certificate and key into dir and
// returns their paths.
func (c *Cluster) writeCertificate(objs []*unstructured.Unstructured, secret string) (string, string, error) {
	data, err := secretData(objs, secret)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(c.dir, secret)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	crt, key := filepath.Join(dir, corev1.TLSCertKey), filepath.Join(dir, corev1.TLSPrivateKeyKey)
	if err := os.WriteFile(crt, data[corev1.TLSCertKey], 0o600); err != nil {
		return "", "", err
	}
	return crt, key, os.WriteFile(key, data[corev1.TLSPrivateKeyKey], 0o600)
}

// kubeconfig writes a kubeconfig that acts as KubeVirt's service account
// sa (the test cluster's admin impersonating it).
func (c *Cluster) kubeconfig(sa string) (string, error) {
	user := "system:serviceaccount:" + KubeVirtNamespace + ":" + sa
	conf := clientcmdapi.NewConfig()
	conf.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	conf.AuthInfos[sa] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.Config.CertData,
		ClientKeyData:         c.Config.KeyData,
		Impersonate:           user,
		ImpersonateGroups:     []string{"system:serviceaccounts", "system:serviceaccounts:" + KubeVirtNamespace, "system:authenticated"},
	}
	conf.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: sa}
	conf.CurrentContext = "test"
	path := filepath.Join(c.dir, sa+".kubeconfig")
	return path, clientcmd.WriteToFile(*conf, path)
}

func (c *Cluster) start(name string, args ...string) *controlPlaneProcess {
	p := &controlPlaneProcess{
		name: name,
		cmd:  exec.Command(filepath.Join(KubeVirtAssets(), name), args...), //nolint:gosec // the repository's own build.
		out:  &lockedBuffer{},
		done: make(chan struct{}),
	}
	p.cmd.Dir = c.dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Die with the test binary, whatever ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.procs = append(c.procs, p)
	if err := p.cmd.Start(); err != nil {
		_, _ = fmt.Fprintf(p.out, "starting %s: %v\n", name, err)
		close(p.done)
		return p
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p
}

// startVirtAPI starts virt-api, routes its Service to it, and waits until
// the API server's aggregator finds KubeVirt's subresource API available.
func (c *Cluster) startVirtAPI(ctx context.Context, cl client.Client, objs []*unstructured.Unstructured) error {
	port, err := localnet.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	crt, key, err := c.writeCertificate(objs, virtAPICertSecret)
	if err != nil {
		return err
	}
	handlerCrt, handlerKey, err := c.writeCertificate(objs, virtHandlerClientSecret)
	if err != nil {
		return err
	}
	kubeconfig, err := c.kubeconfig(virtAPIServiceAccount)
	if err != nil {
		return err
	}
	svc := &corev1.Service{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: virtAPIService}, svc); err != nil {
		return err
	}
	if err := c.ServeService(ctx, cl, svc, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		return err
	}
	virtAPI := c.start("virt-api", "--kubeconfig", kubeconfig, "--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--tls-cert-file", crt, "--tls-key-file", key,
		"--handler-cert-file", handlerCrt, "--handler-key-file", handlerKey)
	return c.waitAvailable(ctx, cl, virtAPI)
}

// ServeService makes the API server reach svc (the Service of a webhook or
// an APIService) at local, the address of the process that serves it here:
// svc gets a ready endpoint, and its cluster IP's ports lead to local.
func (c *Cluster) ServeService(ctx context.Context, cl client.Client, svc *corev1.Service, local string) error {
	if err := publishEndpoint(ctx, cl, svc); err != nil {
		return err
	}
	for _, p := range svc.Spec.Ports {
		c.network.route(net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(p.Port))), local)
	}
	return nil
}

// publishEndpoint gives a Service the EndpointSlice a ready pod behind it
// would give it (virt-api's, the operator's): the aggregator serves an APIService only
// while its Service has a ready endpoint. The address is never dialed (the
// cluster network forwards the Service's cluster IP); it is one of
// TEST-NET-1's, which nothing else in a test cluster uses.
func publishEndpoint(ctx context.Context, cl client.Client, svc *corev1.Service) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      svc.Name + "-test-cluster",
			Labels:    map[string]string{discoveryv1.LabelServiceName: svc.Name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"192.0.2.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
	}
	for _, p := range svc.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{
			Name:     ptr.To(p.Name),
			Port:     ptr.To(p.TargetPort.IntVal),
			Protocol: ptr.To(p.Protocol),
		})
	}
	return cl.Create(ctx, slice)
}

func (c *Cluster) waitAvailable(ctx context.Context, cl client.Client, virtAPI *controlPlaneProcess) error {
	api := &unstructured.Unstructured{}
	api.SetAPIVersion("apiregistration.k8s.io/v1")
	api.SetKind("APIService")
	for {
		err := cl.Get(ctx, client.ObjectKey{Name: subresourcesAPIService}, api)
		if err == nil && APIServiceAvailable(api) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("KubeVirt's APIService %s did not become available: %v\n%s", subresourcesAPIService, api.Object["status"], c.KubeVirtLogs())
		case <-virtAPI.done:
			return fmt.Errorf("virt-api exited:\n%s", c.KubeVirtLogs())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// APIServiceAvailable says the aggregator reports the APIService api
// Available.
func APIServiceAvailable(api *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(api.Object, "status", "conditions")
	for _, raw := range conds {
		m, _ := raw.(map[string]any)
		if m["type"] == "Available" && m["status"] == string(metav1.ConditionTrue) {
			return true
		}
	}
	return false
}

// startVirtController starts virt-controller as KubeVirt's controller
// service account: virt-api's admission reverts VMI status written by
// anyone else.
func (c *Cluster) startVirtController(objs []*unstructured.Unstructured) error {
	port, err := localnet.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	crt, key, err := c.writeCertificate(objs, virtControllerCertSecret)
	if err != nil {
		return err
	}
	kubeconfig, err := c.kubeconfig(virtControllerAccount)
	if err != nil {
		return err
	}
	_ = c.start("virt-controller", "--kubeconfig", kubeconfig, "--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--prom-cert-file", crt, "--prom-key-file", key,
		"--launcher-image", "quay.io/kubevirt/virt-launcher:test-cluster",
		"--exporter-image", "quay.io/kubevirt/virt-exportserver:test-cluster")
	return nil
}
