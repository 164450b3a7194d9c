package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/operator"
	webhookv1alpha1 "github.com/macvirt/macvirt/internal/webhook/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// System is macvirt at work against an API server running KubeVirt's own
// virt-api and virt-controller: the simulated nodes, CDI and guests, and the operator with its webhooks and agent
// endpoint, each in its own manager. The operator can be stopped and a new
// one started while the simulator runs on, as an upgrade of the operator
// replaces its pod and leaves KubeVirt and the VMs alone.
type System struct {
	// AgentEndpoint is the https:// URL guests send heartbeats to, and
	// CABundle the PEM its certificate chains to.
	AgentEndpoint string
	CABundle      []byte
	// OperatorUser is who the operator's requests arrive as.
	OperatorUser string
	// Simulator plays KubeVirt's nodes, CDI and the guests; tests inject faults
	// with it.
	Simulator *simulator.Simulator

	opCfg     *rest.Config
	scheme    *runtime.Scheme
	admin     client.Client
	local     *devserve.Server
	agentAddr string
	// tunnel is where every operator serves the tunnel; none when its Addr
	// is empty.
	tunnel operator.TunnelEndpoint
	// simStopped is closed when the simulator's manager has returned.
	simStopped <-chan struct{}
	// operator is the running operator; nil when stopped.
	operator *operatorRun
	// operators counts the operators started, to name their controllers
	// apart (controller-runtime refuses a name twice in one process).
	operators int
	// runnerSets is every operator's RunnerSetOptions.
	runnerSets operator.RunnerSetOptions
	// buildkitePoll is every operator's BuildkitePoll.
	buildkitePoll time.Duration
}

// operatorRun is one operator's manager at work.
type operatorRun struct {
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Stop waits for the managers, whose context must have ended, and frees
// what the system holds.
func (s *System) Stop() {
	s.StopOperator()
	select {
	case <-s.simStopped:
	case <-time.After(30 * time.Second):
	}
	s.closeServers()
}

// closeServers closes what the system serves outside the API server.
func (s *System) closeServers() {
	if s.local != nil {
		s.local.Close()
	}
}

// prepareServing sets up the addresses the operator serves its webhooks and
// the agent endpoint at, and learns who the operator is.
func (s *System) prepareServing(ctx context.Context) error {
	manifests, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	if s.local, err = devserve.Prepare(devserve.Options{Manifests: manifests, DNSNames: []string{tunnelHost}}); err != nil {
		return err
	}
	agentPort, err := localnet.FreePort(s.local.Host)
	if err != nil {
		return err
	}
	s.agentAddr = net.JoinHostPort(s.local.Host, strconv.Itoa(agentPort))
	s.AgentEndpoint, s.CABundle = "https://"+s.agentAddr, s.local.CABundle
	c, err := client.New(s.opCfg, client.Options{Scheme: s.scheme})
	if err != nil {
		return err
	}
	s.OperatorUser, err = webhookv1alpha1.Identity(ctx, c)
	return err
}

// SystemOptions say how a System runs: the simulator's timings, what its
// nodes and guests hold, and how the operator talks to CI services.
type SystemOptions struct {
	// Speed scales simulated time: 2 makes imports and boots twice as fast
	// (1 when zero).
	Speed float64
	// Realistic gives the simulator a real cluster's timings and jitter
	// (minutes-long imports with progress every 2 s, a 15 s start, a
	// minute-long boot), still scaled by Speed; Seed seeds the jitter.
	Realistic bool
	Seed      int64
	// AppleNodes is the number of simulated Apple-hardware nodes, each
	// advertising the licence's two macOS slots (simulator.Options.Nodes);
	// zero: one node with room for every VM.
	AppleNodes int
	// Network simulates the pod network, node ports and the guests' sshd
	// (simulator.Options.Network), and serves the tunnel (internal/tunnel)
	// as in a cluster: its Service and APIService are installed, the API
	// server proxies to it, and it dials Macs on the simulated pod network
	// as the operator's pod.
	Network bool
	// GuestFiles are on every simulated guest's disk from boot
	// (simulator.Options.GuestFiles), beside the fake CI agents the world's
	// fakes put there.
	GuestFiles map[string]simulator.GuestFile
	// RunnerSets tunes how every operator's runner sets talk to GitHub.
	RunnerSets operator.RunnerSetOptions
	// BuildkitePoll is how often every operator's Buildkite queues read
	// their scheduled jobs (5 s when zero).
	BuildkitePoll time.Duration
	// Registry is the container registry the simulated CDI polls for
	// refreshed images (simulator.Options.Registry); none when nil.
	Registry *simulator.Registry

	// operatorConfig is the operator's own connection to the API server
	// (its service account under the shipped RBAC, Options.OperatorAccount);
	// the administrator's when nil. The simulator, playing KubeVirt's nodes
	// and CDI, and the webhook registrar, playing the installer, keep the
	// administrator's.
	operatorConfig *rest.Config
}

// KubeVirtFeatureGates are the feature gates of a world's KubeVirt unless
// its options name others: the hook sidecar's, the domain hook's transport
// where KubeVirt's Plugins gate is off (docs/install.md).
var KubeVirtFeatureGates = []string{"Sidecar"}

// systemTimings are the simulator's timings in a System at Speed 1: a
// boot of seconds, so a suite or the sandbox shows a claim Ready soon.
func systemTimings(opts SystemOptions) simulator.Options {
	sim := simulator.Options{
		StepInterval: 400 * time.Millisecond, StartDelay: 2 * time.Second, ShutdownDelay: 2 * time.Second,
		GuestBootDelay: 3 * time.Second,
	}
	if opts.Realistic {
		sim = simulator.Realistic(opts.Seed)
	}
	sim = sim.Scaled(opts.Speed)
	sim.Guests = true
	sim.Network = opts.Network
	sim.GarbageCollector = true
	sim.GuestFiles = opts.GuestFiles
	sim.Registry = opts.Registry
	for i := range opts.AppleNodes {
		sim.Nodes = append(sim.Nodes, fmt.Sprintf("apple-node-%d", i+1))
	}
	return sim
}

// newSimulator makes the simulator with opts in a manager of its own; start
// runs that manager until ctx ends and returns a channel closed when it
// has returned.
func newSimulator(c *cluster.Cluster, scheme *runtime.Scheme, opts simulator.Options) (
	sim *simulator.Simulator, start func(context.Context) <-chan struct{}, err error) {
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return nil, nil, err
	}
	opts.ControlPlane = c.Config
	sim = simulator.New(mgr.GetClient(), opts)
	if err := sim.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	return sim, func(ctx context.Context) <-chan struct{} {
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			if err := mgr.Start(ctx); err != nil {
				ctrl.Log.Error(err, "the simulator stopped")
			}
		}()
		return stopped
	}, nil
}

// startSystem starts the simulator and the operator until ctx ends, and
// returns once the webhooks answer. The operator stops VMs through
// virt-api's stop subresource in c.
func startSystem(ctx context.Context, c *cluster.Cluster, scheme *runtime.Scheme, admin client.Client, opts SystemOptions) (*System, error) {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	opCfg := opts.operatorConfig
	if opCfg == nil {
		opCfg = c.Config
	}
	sim, startSim, err := newSimulator(c, scheme, systemTimings(opts))
	if err != nil {
		return nil, err
	}
	sys := &System{Simulator: sim, opCfg: opCfg, scheme: scheme, admin: admin, runnerSets: opts.RunnerSets, buildkitePoll: opts.BuildkitePoll}
	if err := sys.prepareServing(ctx); err != nil {
		sys.closeServers()
		return nil, err
	}
	if opts.Network {
		if err := sys.installTunnel(ctx, c); err != nil {
			sys.closeServers()
			return nil, fmt.Errorf("installing the tunnel: %w", err)
		}
	}
	sys.simStopped = startSim(ctx)
	if err := sys.StartOperator(ctx, OperatorOptions{}); err != nil {
		sys.Stop()
		return nil, err
	}
	return sys, nil
}

// OperatorOptions are what differs between one operator and the next.
type OperatorOptions struct {
	// HookImage is the operator's domain-hook image; its built-in default
	// when empty. A new release brings a new one.
	HookImage string
}

// StartOperator starts an operator, serving the same webhook and agent
// addresses with the same certificates as any before it (as a new pod
// behind the same Services would), until ctx ends or StopOperator. It
// returns once the webhooks answer. One operator runs at a time.
func (s *System) StartOperator(ctx context.Context, opts OperatorOptions) error {
	if s.operator != nil {
		return errors.New("an operator is running; StopOperator first")
	}
	s.operators++
	suffix := ""
	if s.operators > 1 {
		suffix = fmt.Sprintf("-%d", s.operators)
	}
	// The dev server and the agent's address outlive each operator, as the
	// Services in front of an operator's pod do.
	op, err := operator.New(ctx, s.opCfg, operator.Options{Webhooks: true,
		DevServing:      &operator.DevServing{Server: s.local, Registrar: s.admin},
		Agent:           operator.AgentEndpoint{Addr: s.agentAddr},
		Tunnel:          s.tunnel,
		HookImage:       opts.HookImage,
		RunnerSets:      s.runnerSets,
		BuildkitePoll:   s.buildkitePoll,
		ImagesNamespace: operator.DefaultImagesNamespace,
		NameSuffix:      suffix})
	if err != nil {
		return err
	}
	mgr := op.Manager()
	opCtx, cancel := context.WithCancel(ctx)
	run := &operatorRun{cancel: cancel, stopped: make(chan struct{})}
	s.operator = run
	go func() {
		defer close(run.stopped)
		if err := op.Start(opCtx); err != nil {
			ctrl.Log.Error(err, "the operator stopped")
		}
	}()
	// Objects are applied only once the API server calls the webhooks, as
	// in a cluster: the webhook server is up and the API server has taken
	// in the configurations registered after that.
	deadline := time.Now().Add(time.Minute)
	for {
		err := mgr.GetWebhookServer().StartedChecker()(nil)
		if err == nil {
			err = s.admissionCalls(ctx)
		}
		if err == nil && s.tunnel.Addr != "" {
			err = s.tunnelAvailable(ctx)
		}
		if err == nil {
			return nil
		}
		select {
		case <-run.stopped:
			run.cancel()
			s.operator = nil
			return fmt.Errorf("the operator stopped before its webhooks answered: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.StopOperator()
			return fmt.Errorf("the operator's webhooks did not answer within a minute: %w", err)
		}
	}
}

// admissionProbePaths are the webhook paths a pool's creation calls: one of
// each webhook configuration the operator registers.
var admissionProbePaths = []string{"/mutate-macvirt-io-v1alpha1-macpool", "/validate-macvirt-io-v1alpha1-macpool"}

// admissionCalls creates a pool in a dry run and reports an error unless
// the API server called both the mutating and the validating webhook for
// it, as counted by the webhook server's request metric.
func (s *System) admissionCalls(ctx context.Context) error {
	before := webhookRequests()
	probe := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "harness-admission-probe"},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "harness-admission-probe", Namespace: "default"}}
	// Refused or not, the call went through admission when it was counted.
	_ = s.admin.Create(ctx, probe, client.DryRunAll)
	after := webhookRequests()
	for _, path := range admissionProbePaths {
		if after[path] <= before[path] {
			return fmt.Errorf("the API server does not call the operator's webhook %s yet", path)
		}
	}
	return nil
}

// webhookRequests counts the requests the webhook servers of this process
// have answered, by path.
func webhookRequests() map[string]float64 {
	out := map[string]float64{}
	families, err := metrics.Registry.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// StopOperator stops the running operator, if any, and waits for it: its
// webhooks are unregistered and its ports freed, as when its pod goes.
func (s *System) StopOperator() {
	run := s.operator
	if run == nil {
		return
	}
	s.operator = nil
	run.cancel()
	select {
	case <-run.stopped:
	case <-time.After(30 * time.Second):
	}
}
