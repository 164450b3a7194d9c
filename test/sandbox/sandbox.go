// Package sandbox runs the whole of macvirt on one machine: a real API
// server and etcd (the envtest binaries) with macvirt's, KubeVirt's and
// CDI's CRDs; the operator with its admission webhooks served over TLS and
// registered with that API server, and its guest-agent endpoint; and the
// KubeVirt/CDI simulator, whose simulated macOS guests speak the real
// guest-agent protocol. It applies config/samples and shows progress.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/operator"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	webhookv1alpha1 "github.com/macvirt/macvirt/internal/webhook/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// Options configure a sandbox.
type Options struct {
	// UntilReady returns once the sample claim is Ready (or Timeout passed).
	UntilReady bool
	// Timeout bounds UntilReady.
	Timeout time.Duration
	// Machines is the sample pool's idle target.
	Machines int32
	// AppleNodes is the number of simulated Apple-hardware nodes, each
	// advertising the licence's two macOS slots, that VMs are scheduled onto
	// by slots (simulator.Options.Nodes). Zero: one node with room for every
	// VM. Run picks enough for the samples and a few claims when it is zero.
	AppleNodes int
	// Speed scales simulated time: 2 makes imports and boots twice as fast.
	Speed float64
	// Realistic gives the simulator a real cluster's timings and jitter
	// (minutes-long imports with progress every 2 s, a 15 s start, a
	// minute-long boot), still scaled by Speed. virt-controller's own
	// crash-loop backoff runs on its clock, whatever the speed.
	Realistic bool
	// Seed seeds the realistic jitter; the same seed repeats a run's timings.
	Seed int64
	// Kubeconfig is where to write the kubeconfig; a temporary file if empty.
	Kubeconfig string
	// TenantKubeconfig is where to write the tenant's kubeconfig (user
	// TenantUser, namespace TenantNamespace); a temporary file if empty.
	TenantKubeconfig string
	// Out receives progress; Live redraws a table in place (a terminal).
	Out  io.Writer
	Live bool
	// GitHubFake runs a fake GitHub and a runner set of the tenant's
	// against it, and runs one job on a warm Mac (docs/github-actions.md);
	// with UntilReady, the sandbox also waits for that job's success.
	// RunnerCommand is the program the guests' run.sh execs with
	// FakeRunnerArg (the sandbox's own binary).
	GitHubFake    bool
	RunnerCommand string
	// BuildkiteFake runs a fake Buildkite and a Buildkite queue of the
	// tenant's against it, and runs one job on a warm Mac
	// (docs/buildkite.md); with UntilReady, the sandbox also waits for
	// that job's end. The guests' buildkite-agent execs RunnerCommand with
	// FakeBuildkiteAgentArg.
	BuildkiteFake bool
	// Runtime "vz" adds two fake Apple-silicon Macs (MacHosts with host
	// agents driving a fake tart), a Virtualization class and a claim of
	// it, next to the simulated KubeVirt nodes; with UntilReady, the
	// sandbox also waits for that claim to be Ready.
	Runtime string
}

// RuntimeVZ is Options.Runtime for the Virtualization runtime.
const RuntimeVZ = "vz"

// sampleClaim is the claim of config/samples the sandbox waits for.
var sampleClaim = types.NamespacedName{Namespace: "default", Name: "ios-build"}

// Run runs the sandbox until ctx ends (or, with UntilReady, the sample
// claim is Ready), then stops everything it started and removes its files.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	start := time.Now()
	tmp, err := os.MkdirTemp("", "macvirt-sandbox-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	scheme, err := macvirtscheme.New()
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintln(opts.Out, "starting the API server, etcd, and KubeVirt's virt-api and virt-controller ...")
	if opts.Realistic {
		_, _ = fmt.Fprintf(opts.Out, "realistic timings (--seed %d repeats them)\n", opts.Seed)
	}
	cluster, err := StartCluster(scheme)
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Stop() }()
	env, cfg := cluster.Environment, cluster.Config
	kubeconfig, err := writeKubeconfig(env, opts.Kubeconfig, tmp)
	if err != nil {
		return err
	}
	if opts.Kubeconfig != "" {
		defer func() { _ = os.Remove(kubeconfig) }()
	}

	if opts.AppleNodes == 0 {
		// The sample pool, the sample claim's machine (which the pool
		// replaces) and three on-demand claims, two slots a node.
		opts.AppleNodes = max(2, (int(opts.Machines)+1+3+1)/2)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	sysOpts := SystemOptions{Options: opts, Network: true, Cluster: cluster}
	var gh *fakegithub.Server
	if opts.GitHubFake {
		if opts.RunnerCommand == "" {
			return errors.New("the fake GitHub needs RunnerCommand, the program guests run as GitHub's runner")
		}
		gh = fakegithub.New(fakegithub.Options{Tokens: []string{githubFakeToken}})
		defer gh.Close()
		sysOpts.GuestFiles = runnerGuestFiles(opts.RunnerCommand)
	}
	var bk *fakebuildkite.Server
	if opts.BuildkiteFake {
		if opts.RunnerCommand == "" {
			return errors.New("the fake Buildkite needs RunnerCommand, the program guests run as buildkite-agent")
		}
		bk = fakebuildkite.New(buildkiteFakeToken, buildkiteFakeQueue)
		defer bk.Close()
		if sysOpts.GuestFiles == nil {
			sysOpts.GuestFiles = map[string]simulator.GuestFile{}
		}
		maps.Copy(sysOpts.GuestFiles, buildkiteGuestFiles(opts.RunnerCommand))
	}
	sys, err := StartSystem(runCtx, cfg, scheme, sysOpts)
	if err != nil {
		return err
	}
	defer func() { stop(); sys.Stop() }()

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := ApplySamples(runCtx, c, opts.Machines); err != nil {
		return err
	}
	tenant := opts.TenantKubeconfig
	if tenant == "" {
		tenant = filepath.Join(tmp, "tenant.kubeconfig")
	} else {
		defer func() { _ = os.Remove(tenant) }()
	}
	if err := SetUpTenant(runCtx, c, TenantUser, TenantNamespace); err != nil {
		return err
	}
	if err := ApplyTenantClass(runCtx, c); err != nil {
		return err
	}
	if err := WriteTenantKubeconfig(env, TenantUser, TenantNamespace, tenant); err != nil {
		return err
	}
	jobDone := make(chan error, 3)
	if opts.Runtime == RuntimeVZ {
		macs, err := StartMacs(runCtx, cfg, c, MacsOptions{Names: VZMacs, Labels: map[string]string{vzHostLabel: "true"},
			Images: []string{VZImage}, Dir: filepath.Join(tmp, "macs")})
		if err != nil {
			return fmt.Errorf("starting the fake Macs: %w", err)
		}
		defer macs.Stop()
		if err := ApplyVZClass(runCtx, c); err != nil {
			return err
		}
		go func() {
			err := runVZClaim(runCtx, c, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "vz: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	if bk != nil {
		if err := ApplyBuildkiteQueue(runCtx, c, bk.URL()); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(opts.Out, "fake Buildkite at %s: queue %s (kubectl get macbuildkitequeue -n %s)\n", bk.URL(), sandboxQueue, sandboxQueue.Namespace)
		go func() {
			err := runFakeBuildkiteJob(runCtx, c, bk, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "buildkite: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	if gh != nil {
		if err := ApplyRunnerSet(runCtx, c, gh.URL()); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(opts.Out, "fake GitHub at %s: runner set %s (kubectl mac runners -n %s)\n", gh.URL(), sandboxRunnerSet, sandboxRunnerSet.Namespace)
		go func() {
			err := runFakeJob(runCtx, c, gh, opts.Out)
			if err != nil && runCtx.Err() == nil {
				_, _ = fmt.Fprintf(opts.Out, "github: %v\n", err)
			}
			jobDone <- err
		}()
	} else {
		jobDone <- nil
	}
	_, _ = fmt.Fprintf(opts.Out, "\nsandbox up in %s\n  kubeconfig: %s\n  try: kubectl --kubeconfig %s get macvirt -A\n       kubectl --kubeconfig %s get macclaim ios-build -o yaml\n"+
		"  as tenant %s (namespace %s: the shipped tenant roles only; its Macs through the API server), with kubectl mac (make kubectl-mac puts it in bin/):\n"+
		"       export KUBECONFIG=%s PATH=$PWD/bin:$PATH\n       kubectl mac claim demo --class %s --wait\n       kubectl mac ssh demo -- uname -a\n"+
		"       echo hi | kubectl mac cp - demo:note.txt && kubectl mac cp demo:note.txt -\n       kubectl mac port-forward demo 2222:22 ; kubectl mac vnc demo\n\n",
		time.Since(start).Round(100*time.Millisecond), kubeconfig, kubeconfig, kubeconfig, TenantUser, TenantNamespace, tenant, TenantClass)
	if err := watch(runCtx, c, opts, start); err != nil || !opts.UntilReady {
		return err
	}
	deadline := time.After(max(time.Minute, opts.Timeout-time.Since(start)))
	for range 3 {
		select {
		case err := <-jobDone:
			if err != nil {
				return err
			}
		case <-deadline:
			return errors.New("the fake GitHub's or Buildkite's job, or the Virtualization claim, did not end in time")
		}
	}
	return nil
}

func writeKubeconfig(env *envtest.Environment, path, tmp string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "sandbox-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	if path == "" {
		path = filepath.Join(tmp, "kubeconfig")
	}
	return path, os.WriteFile(path, b, 0o600)
}

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
	// simStopped receives when the simulator's manager returns.
	simStopped chan struct{}
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

// SystemOptions say how a System runs.
type SystemOptions struct {
	Options
	// OperatorConfig is the operator's own connection to the API server (a
	// service account under the shipped RBAC, in the tenancy tests); the
	// administrator's config when nil. The simulator, playing KubeVirt's
	// nodes and CDI, and the webhook registrar, playing the installer, keep the
	// administrator's.
	OperatorConfig *rest.Config
	// Network simulates the pod network, node ports and the guests' sshd
	// (simulator.Options.Network).
	Network bool
	// GuestFiles are on every simulated guest's disk from boot
	// (simulator.Options.GuestFiles): GitHub's runner, for runner sets.
	GuestFiles map[string]simulator.GuestFile
	// RunnerSets tunes how every operator's runner sets talk to GitHub.
	RunnerSets operator.RunnerSetOptions
	// BuildkitePoll is how often every operator's Buildkite queues read
	// their scheduled jobs (5 s when zero).
	BuildkitePoll time.Duration
	// Registry is the container registry the simulated CDI polls for
	// refreshed images (simulator.Options.Registry); none when nil.
	Registry *simulator.Registry
	// Cluster is the cluster cfg reaches (StartCluster's). When set, and
	// with Network, the operator serves the tunnel (internal/tunnel) as in
	// a cluster: its Service and APIService are installed, the API server
	// proxies to it, and it dials Macs on the simulated pod network as the
	// operator's pod.
	Cluster *cluster.Cluster
}

// KubeVirtFeatureGates are the feature gates of the KubeVirt that
// StartCluster runs: the hook sidecar's, the domain hook's transport where
// KubeVirt's Plugins gate is off (docs/install.md).
var KubeVirtFeatureGates = []string{"Sidecar"}

// StartCluster starts an API server and etcd with KubeVirt's own virt-api
// and virt-controller, for a System.
func StartCluster(scheme *runtime.Scheme) (*cluster.Cluster, error) {
	return cluster.StartWithKubeVirt(scheme, cluster.KubeVirtOptions{FeatureGates: KubeVirtFeatureGates})
}

// StartSystem starts the simulator and the operator until ctx ends, and
// returns once the webhooks answer. cfg is an administrator's connection to
// a cluster StartCluster (or cluster.StartWithKubeVirt) started; the
// operator stops VMs through virt-api's stop subresource there.
func StartSystem(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts SystemOptions) (*System, error) {
	if opts.Speed <= 0 {
		opts.Speed = 1
	}
	opCfg := opts.OperatorConfig
	if opCfg == nil {
		opCfg = cfg
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	simMgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return nil, err
	}
	simOpts := simulator.Options{
		StepInterval: 400 * time.Millisecond, StartDelay: 2 * time.Second, ShutdownDelay: 2 * time.Second,
		GuestBootDelay: 3 * time.Second,
	}
	if opts.Realistic {
		simOpts = simulator.Realistic(opts.Seed)
	}
	simOpts = simOpts.Scaled(opts.Speed)
	simOpts.Guests = true
	simOpts.Network = opts.Network
	simOpts.GarbageCollector = true
	simOpts.GuestFiles = opts.GuestFiles
	simOpts.Registry = opts.Registry
	for i := range opts.AppleNodes {
		simOpts.Nodes = append(simOpts.Nodes, fmt.Sprintf("apple-node-%d", i+1))
	}
	simOpts.ControlPlane = cfg
	sim := simulator.New(simMgr.GetClient(), simOpts)
	if err := sim.SetupWithManager(simMgr); err != nil {
		return nil, err
	}
	sys := &System{Simulator: sim, opCfg: opCfg, scheme: scheme, admin: admin,
		simStopped: make(chan struct{}), runnerSets: opts.RunnerSets, buildkitePoll: opts.BuildkitePoll}
	if err := sys.prepareServing(ctx); err != nil {
		sys.closeServers()
		return nil, err
	}
	if opts.Cluster != nil && opts.Network {
		if err := sys.installTunnel(ctx, opts.Cluster); err != nil {
			sys.closeServers()
			return nil, fmt.Errorf("installing the tunnel: %w", err)
		}
	}
	go func() {
		defer close(sys.simStopped)
		if err := simMgr.Start(ctx); err != nil {
			ctrl.Log.Error(err, "sandbox simulator stopped")
		}
	}()
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
			ctrl.Log.Error(err, "sandbox operator stopped")
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
	probe := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-admission-probe"},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sandbox-admission-probe", Namespace: "default"}}
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

// ApplySamples creates what the samples need that a cluster would already
// have (the operator's namespace, where it keeps class snapshots, unless it
// exists; the golden-image DataSources, in the images namespace once the
// operator has made it, as it does at start), then config/samples, with the
// sample pool's idle target set to machines when that is not 0. The pool's
// namespace is the operator's to make, as the install's.
func ApplySamples(ctx context.Context, c client.Client, machines int32) error {
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operator.DefaultNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Get(ctx, client.ObjectKey{Name: operator.DefaultImagesNamespace}, &corev1.Namespace{})
		if err == nil {
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return fmt.Errorf("the operator did not create the images namespace %s: %w", operator.DefaultImagesNamespace, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, name := range []string{"sonoma", "opencore-1.0"} {
		// The golden image's PVC: the simulated CDI, like CDI, clones only
		// from a DataSource whose source PVC exists.
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")}},
			}}
		if err := c.Create(ctx, pvc); err != nil {
			return err
		}
		ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: name},
			Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "macvirt-images", Name: name}}}}
		if err := c.Create(ctx, ds); err != nil {
			return err
		}
	}
	dir := filepath.Join(cluster.RepoRoot(), "config", "samples")
	for _, file := range []string{"macvirt_v1alpha1_macclass.yaml", "macvirt_v1alpha1_macpool.yaml", "macvirt_v1alpha1_macclaim.yaml"} {
		objs, err := readObjects(filepath.Join(dir, file), c.Scheme())
		if err != nil {
			return err
		}
		for _, o := range objs {
			if p, ok := o.(*macvirtv1alpha1.MacPool); ok && machines > 0 {
				p.Spec.Idle = &machines
				if p.Spec.MaxMachines != nil && *p.Spec.MaxMachines < machines+1 {
					maxM := machines + 1
					p.Spec.MaxMachines = &maxM
				}
			}
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("applying %s: %w", file, err)
			}
		}
	}
	return nil
}

// watch shows claims and machines until ctx ends or, with UntilReady, the
// sample claim is Ready.
func watch(ctx context.Context, c client.Client, opts Options, start time.Time) error {
	var deadline <-chan time.Time
	if opts.UntilReady {
		deadline = time.After(opts.Timeout)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		table, ready, why := snapshot(ctx, c)
		if table != last {
			if opts.Live {
				_, _ = fmt.Fprint(opts.Out, "\033[H\033[2J")
			}
			_, _ = fmt.Fprint(opts.Out, table)
			last = table
		}
		if opts.UntilReady && ready {
			_, _ = fmt.Fprintf(opts.Out, "claim %s is Ready, %s after start\n", sampleClaim, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-deadline:
			return fmt.Errorf("claim %s not Ready after %s: %s", sampleClaim, opts.Timeout, why)
		case <-tick.C:
		}
	}
}

// snapshot renders claims and machines as a table, and says whether the
// sample claim is Ready and, if not, why.
func snapshot(ctx context.Context, c client.Client) (string, bool, string) {
	var b strings.Builder
	var claims macvirtv1alpha1.MacClaimList
	var machines macvirtv1alpha1.MacMachineList
	if err := c.List(ctx, &claims); err != nil {
		return "", false, err.Error()
	}
	if err := c.List(ctx, &machines); err != nil {
		return "", false, err.Error()
	}
	fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "KIND", "NAMESPACE/NAME", "PHASE", "MESSAGE")
	ready, why := false, "the claim does not exist"
	for _, cl := range claims.Items {
		msg := ""
		if rc := meta.FindStatusCondition(cl.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = rc.Message
			if cl.Namespace == sampleClaim.Namespace && cl.Name == sampleClaim.Name {
				ready, why = rc.Status == metav1.ConditionTrue, rc.Message
			}
		}
		fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "MacClaim", cl.Namespace+"/"+cl.Name, cl.Status.Phase, truncate(msg, 70))
	}
	for _, m := range machines.Items {
		msg := ""
		if rc := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
			msg = rc.Message
		}
		fmt.Fprintf(&b, "%-10s %-28s %-10s %s\n", "MacMachine", m.Namespace+"/"+m.Name, m.Status.Phase, truncate(msg, 70))
	}
	return b.String(), ready, why
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
