package operator

import (
	"context"
	"net"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/guestendpoint"
)

// DefaultNamespace is the operator's namespace when none is set: the one
// config/default installs it in.
const DefaultNamespace = "macvirt-system"

// DefaultImagesNamespace is where golden images are kept when the flag is
// not given.
const DefaultImagesNamespace = "macvirt-images"

// Options are everything the operator runs with: cmd/main.go's flags, or
// what the sandbox and the tests set. The zero value of a server's address
// runs no such server.
type Options struct {
	// Namespace is the namespace the operator runs in, where it keeps its
	// class snapshots (DefaultNamespace when empty). Its RBAC grants it
	// controllerrevisions and Secrets there only.
	Namespace string
	// ImagesNamespace keeps golden images: MacImage copies and DataSources,
	// and refreshed images' DataImportCrons. Empty: neither is served.
	ImagesNamespace string

	// MetricsAddr is where the metrics endpoint listens; none when empty or
	// "0". SecureMetrics serves it over HTTPS, behind authentication and
	// authorization; MetricsCert is its certificate (a generated one when
	// its directory is empty).
	MetricsAddr   string
	SecureMetrics bool
	MetricsCert   CertFiles
	// ProbeAddr is where the health and readiness probes listen; none when
	// empty or "0".
	ProbeAddr string
	// LeaderElection runs one active operator among the replicas.
	LeaderElection bool
	// EnableHTTP2 serves the metrics and webhook servers over HTTP/2 too;
	// off by default, for the HTTP/2 Stream Cancellation and Rapid Reset
	// CVEs (GHSA-qppj-fm5r-hxr3, GHSA-4374-p667-p6c8).
	EnableHTTP2 bool

	// Webhooks serves the admission webhooks (cmd/main.go and the sandbox
	// do; the integration tests run the controllers without them), on
	// WebhookPort with WebhookCert, or as DevServing says.
	Webhooks    bool
	WebhookPort int
	WebhookCert CertFiles
	// DevServing, when set, serves the webhooks and the guest-agent
	// endpoint from this process outside the cluster (make run, the
	// sandbox), with throw-away certificates.
	DevServing *DevServing

	// Agent says where the guest-agent endpoint listens and what every
	// machine's config disk says about it.
	Agent AgentEndpoint
	// Tunnel says where the tunnel API (internal/tunnel) listens, for the
	// APIService that brings tenants to their Macs through the API server.
	Tunnel TunnelEndpoint

	// DomainHook is the transport of the macOS domain settings (the
	// --domain-hook flag); auto when empty: a KubeVirt Plugin of CEL hooks
	// where KubeVirt serves the Plugin kind, KubeVirt's hook sidecar
	// elsewhere.
	DomainHook contract.Transport
	// HookImage is the domain-hook image: KubeVirt's hook sidecar on every
	// VM, or the Plugin's sidecar (plugin-sidecar). When empty, the one for
	// the cluster's KubeVirt minor (install.ChooseImage).
	HookImage string
	// LookupEnv reads the RELATED_IMAGE_* variables install.ChooseImage
	// looks at (os.LookupEnv in the manager); none are read when nil.
	LookupEnv func(string) (string, bool)
	// EmulatorPath optionally overrides the node's QEMU binary.
	EmulatorPath string
	// MonitoringObjects has the operator write its ServiceMonitor and alerts
	// into Namespace where the cluster serves those kinds (the OLM bundle
	// turns it on).
	MonitoringObjects bool

	// ClaimWorkers is the number of claims bound in parallel, and of
	// machines (and their network exposure) reconciled in parallel
	// (default 16).
	ClaimWorkers int
	// ConnectionResync is how often Ready claims' connection Secrets are
	// applied again (claim.DefaultConnectionResync when zero).
	ConnectionResync time.Duration
	// RunnerSets tunes how runner sets talk to GitHub.
	RunnerSets RunnerSetOptions
	// BuildkitePoll is how often a Buildkite queue's scheduled jobs are
	// read (5 s when zero).
	BuildkitePoll time.Duration

	// What tests and benchmarks change.

	// StopConfig is where the stop subresource is called; the operator's
	// API server when nil. The controller suite points it at a recording,
	// failure-injecting proxy in front of virt-api.
	StopConfig *rest.Config
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Controllers selects the controllers to run; all when empty. Tests run
	// a subset (for example only claims, against hand-made machines).
	Controllers []Controller
	// WrapClient, when set, wraps the manager's client for the controllers
	// (tests inject conflicts and stale lists with it, the bench counts
	// writes).
	WrapClient func(client.Client) client.Client
	// NameSuffix is appended to controller names so several operators can
	// run in one process.
	NameSuffix string
}

// RunnerSetOptions tune the runner sets' GitHub clients and listeners;
// the zero value is what production uses.
type RunnerSetOptions struct {
	// Client tunes retries and timeouts of GitHub requests.
	Client github.Options
	// Backoff is the first wait after a listener fails (5 s when zero);
	// it doubles up to MaxBackoff (5 min when zero).
	Backoff, MaxBackoff time.Duration
	// Resync is how often GitHub's runner list is read (15 s when zero).
	Resync time.Duration
}

// CertFiles name a serving certificate: the directory and the file names
// in it (tls.crt and tls.key when empty).
type CertFiles struct {
	Dir, CertName, KeyName string
}

// DevServing serves the operator's webhooks and guest-agent endpoint from a
// process outside the cluster.
type DevServing struct {
	// Server is a dev server prepared before, which outlives this operator
	// (the sandbox starts one operator after another on it). When nil, New
	// prepares one for Host from Manifests, and it goes with the operator.
	Server    *devserve.Server
	Host      string
	Manifests []byte
	// Registrar registers the webhook configurations (the installer's
	// client); the operator's own when nil.
	Registrar client.Client
}

// AgentEndpoint says where the guest-agent endpoint listens and what every
// machine's config disk says about it.
type AgentEndpoint struct {
	// Addr is the listen address (":9444"); no endpoint when empty or "0",
	// and then no machine becomes Ready.
	Addr string
	// URL is what guest agents reach the endpoint at; the agent Service of
	// the operator's namespace when empty.
	URL string
	// CertDir holds tls.crt, tls.key and, optionally, ca.crt; the webhook
	// certificate's directory when empty, the dev server's when dev serving.
	CertDir string
	// Address, when set, is what config disks say, as given, instead of
	// what URL and the certificate make (tests without an endpoint).
	Address *guestendpoint.Address
}

// TunnelEndpoint says where the tunnel API listens.
type TunnelEndpoint struct {
	// Addr is the listen address (":9445"); no tunnel when empty or "0",
	// and then machines' NetworkPolicies do not let the operator in.
	Addr string
	// CertDir holds the serving certificate (tls.crt and tls.key, or
	// apiserver.crt and apiserver.key as OLM mounts an APIService's); the
	// webhook certificate's directory when empty, the dev server's when dev
	// serving.
	CertDir string
	// Dial connects to a Mac; a net.Dialer when nil. The sandbox dials
	// through the simulated pod network as the operator's pod.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Controller names one of the operator's controllers.
type Controller string

// The operator's controllers.
const (
	MachineController Controller = "machine"
	ClassController   Controller = "class"
	PoolController    Controller = "pool"
	ClaimController   Controller = "claim"
	// ExposureController keeps each machine's NetworkPolicy following its
	// binding; it runs whenever MachineController does, and alone in the
	// bench (beside the claim controller, against hand-made machines).
	ExposureController Controller = "exposure"
	// NodeController advertises the macOS slots of Apple-hardware nodes.
	NodeController Controller = "node"
	// RunnerSetController runs GitHub Actions runner sets.
	RunnerSetController Controller = "runnerset"
	// ImageController captures Macs as golden images.
	ImageController Controller = "image"
	// BuildkiteController runs Buildkite queues.
	BuildkiteController Controller = "buildkite"
	// HostController says which MacHosts are alive and take machines.
	HostController Controller = "host"
)

func (o *Options) runs(c Controller) bool {
	if c == ExposureController && slices.Contains(o.Controllers, MachineController) {
		return true
	}
	return len(o.Controllers) == 0 || slices.Contains(o.Controllers, c)
}

// namespace is the operator's namespace.
func (o *Options) namespace() string {
	if o.Namespace == "" {
		return DefaultNamespace
	}
	return o.Namespace
}

// startupTimeout bounds each read New makes of the cluster before the
// manager runs (the KubeVirt version, the domain-hook transport, the
// operator's own identity).
const startupTimeout = 30 * time.Second
