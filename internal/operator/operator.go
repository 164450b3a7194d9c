// Package operator composes macvirt's operator: one controller-runtime
// manager with its cache, metrics and probe servers, the admission
// webhooks, the guest-agent endpoint, the domain hook's installation and
// the controllers. cmd/main.go, the sandbox, the integration tests and the
// bench all build it with New, so they run the composition that ships.
package operator

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/buildkitequeue"
	"github.com/macvirt/macvirt/internal/controller/claim"
	"github.com/macvirt/macvirt/internal/controller/class"
	"github.com/macvirt/macvirt/internal/controller/host"
	"github.com/macvirt/macvirt/internal/controller/image"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/machine"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/nodeslots"
	"github.com/macvirt/macvirt/internal/controller/pool"
	"github.com/macvirt/macvirt/internal/controller/runnerset"
	"github.com/macvirt/macvirt/internal/devserve"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/internal/vmstop"
	webhookv1alpha1 "github.com/macvirt/macvirt/internal/webhook/v1alpha1"
)

// Operator is the composed operator, ready to Start.
type Operator struct {
	mgr ctrl.Manager
	// ownDev is the dev server New prepared, closed when the operator stops.
	ownDev *devserve.Server
}

// Manager is the operator's manager (tests read its cache).
func (o *Operator) Manager() ctrl.Manager { return o.mgr }

// Start runs the operator until ctx ends.
func (o *Operator) Start(ctx context.Context) error {
	err := o.mgr.Start(ctx)
	o.ownDev.Close()
	return err
}

// New composes the operator against the API server of cfg. ctx bounds the
// reads it makes first (each within startupTimeout): what KubeVirt's
// version and features are, and who the operator is. Nothing of opts is
// changed.
func New(ctx context.Context, cfg *rest.Config, opts Options) (*Operator, error) {
	log := ctrl.Log.WithName("setup")
	scheme, err := macvirtscheme.New()
	if err != nil {
		return nil, err
	}
	var tlsOpts []func(*tls.Config)
	if !opts.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	op := &Operator{}
	dev := opts.DevServing
	var devServer *devserve.Server
	if dev != nil {
		if devServer = dev.Server; devServer == nil {
			port := opts.WebhookPort
			if devServer, err = devserve.Prepare(devserve.Options{Host: dev.Host, Port: port, Manifests: dev.Manifests}); err != nil {
				return nil, fmt.Errorf("preparing to serve the webhooks locally: %w", err)
			}
			op.ownDev = devServer
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(),
		Metrics:                metricsOptions(&opts, tlsOpts),
		WebhookServer:          webhookServer(&opts, devServer, tlsOpts),
		HealthProbeBindAddress: orOff(opts.ProbeAddr),
		LeaderElection:         opts.LeaderElection,
		LeaderElectionID:       "macvirt.io",
	})
	if err != nil {
		op.ownDev.Close()
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	op.mgr = mgr
	if err := compose(ctx, mgr, &opts, devServer, tlsOpts, log); err != nil {
		op.ownDev.Close()
		return nil, err
	}
	if devServer != nil {
		log.Info("Serving admission webhooks locally", "url", devServer.URL(), "configurations", devserve.NamePrefix+"*")
	}
	return op, nil
}

// compose adds everything the operator runs to mgr.
func compose(ctx context.Context, mgr ctrl.Manager, opts *Options, dev *devserve.Server, tlsOpts []func(*tls.Config), log logr.Logger) error {
	namespace := opts.namespace()
	agent, agentServer, err := agentEndpoint(opts, dev)
	if err != nil {
		return fmt.Errorf("configuring the guest-agent endpoint: %w", err)
	}
	tunnelSrv, tunnelPeer, err := tunnelServer(mgr, opts, dev)
	if err != nil {
		return fmt.Errorf("configuring the tunnel: %w", err)
	}
	// Tunnels to the guests of Apple-silicon hosts ride on the connections
	// their agents hold to the agent endpoint.
	var hostTunnels guestendpoint.HostTunnels
	if tunnelSrv != nil && agentServer != nil {
		tunnelSrv.Hosts = &tunnel.Hosts{}
		hostTunnels = tunnelSrv.Hosts
		if err := mgr.Add(tunnelSrv.Hosts); err != nil {
			return fmt.Errorf("adding the host agents' tunnels: %w", err)
		}
	}
	if tunnelSrv != nil {
		tunnelSrv.TLSOpts = tlsOpts
		if err := mgr.Add(tunnelSrv); err != nil {
			return fmt.Errorf("adding the tunnel: %w", err)
		}
	}
	hook, err := setUpDomainHook(ctx, mgr, opts)
	if err != nil {
		return err
	}
	if opts.ImagesNamespace != "" && opts.runs(ImageController) {
		if err := mgr.Add(&ImagesNamespace{Client: mgr.GetClient(), Name: opts.ImagesNamespace,
			Log: mgr.GetLogger().WithName("images-namespace")}); err != nil {
			return err
		}
	}
	if opts.MonitoringObjects {
		if err := mgr.Add(&MonitoringObjects{Client: mgr.GetClient(), Mapper: mgr.GetRESTMapper(), Namespace: namespace,
			Log: mgr.GetLogger().WithName("monitoring")}); err != nil {
			return err
		}
	}
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	var snapshots client.Reader
	if opts.runs(MachineController) || opts.runs(ExposureController) || opts.runs(ClaimController) || agentServer != nil {
		if snapshots, err = snapshotCache(mgr, namespace); err != nil {
			return err
		}
	}
	var listeningSince func() time.Time
	if agentServer != nil {
		endpoint := &guestendpoint.Handler{Client: mgr.GetClient(), Sources: mgr.GetAPIReader(),
			Classes: classhistory.Resolver{Snapshots: snapshots, Namespace: namespace},
			Hosts: &guestendpoint.HostConfigHandler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Address: agent,
				Tunnels: hostTunnels}}
		if err := notifyWatches(ctx, mgr.GetCache(), endpoint.Changed); err != nil {
			return err
		}
		agentServer.Handler = endpoint
		agentServer.TLSOpts = tlsOpts
		if err := mgr.Add(agentServer); err != nil {
			return fmt.Errorf("adding the guest-agent endpoint: %w", err)
		}
		listeningSince = agentServer.ListeningSince
	} else {
		log.Info("Guest-agent endpoint disabled: no address or no certificate; machines will not become Ready")
	}
	if err := setUpControllers(mgr, opts, controllerDeps{hook: hook, agent: agent, listeningSince: listeningSince,
		snapshots: snapshots, tunnel: tunnelPeer}); err != nil {
		return err
	}
	if opts.Webhooks {
		if err := setUpWebhooks(ctx, mgr, opts, dev); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the ready check: %w", err)
	}
	return metrics.Register(mgr.GetCache())
}

// controllerDeps is what the controllers get beside the options.
type controllerDeps struct {
	hook           domainHook
	agent          guestendpoint.Address
	listeningSince func() time.Time
	snapshots      client.Reader
	tunnel         *networkingv1.NetworkPolicyPeer
}

// setUpControllers registers the controllers opts runs.
func setUpControllers(mgr ctrl.Manager, opts *Options, d controllerDeps) error {
	stopCfg := opts.StopConfig
	if stopCfg == nil {
		stopCfg = mgr.GetConfig()
	}
	stopper, err := vmstop.NewRESTStopper(stopCfg, nil)
	if err != nil {
		return err
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	workers := opts.ClaimWorkers
	if workers <= 0 {
		workers = 16
	}
	namespace := opts.namespace()
	c := mgr.GetClient()
	if opts.WrapClient != nil {
		c = opts.WrapClient(c)
	}
	// An install whose MacHost CRD is not there yet (applied after the
	// operator, or an older release's CRDs) runs KubeVirt machines all the
	// same: nothing waits on a kind the API server does not serve.
	hosts, err := kindServed(mgr.GetRESTMapper(), macvirtv1alpha1.GroupVersion.WithKind("MacHost"))
	if err != nil {
		return err
	}
	if !hosts {
		ctrl.Log.WithName("operator").Info("the API server does not serve MacHosts (is the CRD applied?): Apple-silicon Macs are not watched until the operator restarts with it")
	}
	setups := []struct {
		name  Controller
		setup func() error
	}{
		{MachineController, func() error {
			return (&machine.Reconciler{
				Client:                  c,
				APIReader:               mgr.GetAPIReader(),
				Classes:                 classhistory.Resolver{Classes: c, Snapshots: d.snapshots, Namespace: namespace},
				Recorder:                mgr.GetEventRecorder("macvirt-machine-controller"),
				Stopper:                 stopper,
				Render:                  d.hook.render,
				DomainHook:              d.hook.ready,
				Agent:                   d.agent,
				Tunnel:                  d.tunnel,
				ListeningSince:          d.listeningSince,
				Clock:                   clk,
				WatchHosts:              hosts,
				ControllerName:          "macmachine" + opts.NameSuffix,
				MaxConcurrentReconciles: workers,
			}).SetupWithManager(mgr)
		}},
		{ExposureController, func() error {
			return (&machine.ExposureReconciler{
				Client:                  c,
				MaxConcurrentReconciles: workers,
				Classes:                 classhistory.Resolver{Classes: c, Snapshots: d.snapshots, Namespace: namespace},
				Tunnel:                  d.tunnel,
				ControllerName:          "macmachine-exposure" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{ClassController, func() error {
			return (&class.Reconciler{
				Client:          c,
				APIReader:       mgr.GetAPIReader(),
				Namespace:       namespace,
				ImagesNamespace: opts.ImagesNamespace,
				ControllerName:  "macclass" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{PoolController, func() error {
			return (&pool.Reconciler{
				Client:         c,
				Clock:          clk,
				Recorder:       mgr.GetEventRecorder("macvirt-pool-controller"),
				ControllerName: "macpool" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{ClaimController, func() error {
			return (&claim.Reconciler{
				Client:                  c,
				APIReader:               mgr.GetAPIReader(),
				Recorder:                mgr.GetEventRecorder("macvirt-claim-controller"),
				Clock:                   clk,
				MaxConcurrentReconciles: workers,
				ConnectionResync:        opts.ConnectionResync,
				Classes:                 classhistory.Resolver{Classes: c, Snapshots: d.snapshots, Namespace: namespace},
				ControllerName:          "macclaim" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{ImageController, func() error {
			if opts.ImagesNamespace == "" {
				return nil
			}
			return (&image.Reconciler{
				Client:          c,
				Recorder:        mgr.GetEventRecorder("macvirt-image-controller"),
				ImagesNamespace: opts.ImagesNamespace,
				ControllerName:  "macimage" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{RunnerSetController, func() error {
			rs := opts.RunnerSets
			return (&runnerset.Reconciler{
				Client:         c,
				APIReader:      mgr.GetAPIReader(),
				Recorder:       mgr.GetEventRecorder("macvirt-runnerset-controller"),
				Clock:          clk,
				Listeners:      runnerset.NewListeners(rs.Client, rs.Backoff, rs.MaxBackoff),
				Resync:         rs.Resync,
				ControllerName: "macrunnerset" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{BuildkiteController, func() error {
			return (&buildkitequeue.Reconciler{
				Client:         c,
				APIReader:      mgr.GetAPIReader(),
				Recorder:       mgr.GetEventRecorder("macvirt-buildkite-controller"),
				Clock:          clk,
				Poll:           opts.BuildkitePoll,
				ControllerName: "macbuildkitequeue" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{NodeController, func() error {
			return (&nodeslots.Reconciler{
				Client:         c,
				Recorder:       mgr.GetEventRecorder("macvirt-node-controller"),
				ControllerName: "nodeslots" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{HostController, func() error {
			if !hosts {
				return nil
			}
			return (&host.Reconciler{
				Client:         c,
				Clock:          clk,
				Recorder:       mgr.GetEventRecorder("macvirt-host-controller"),
				ControllerName: "machost" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
	}
	for _, s := range setups {
		if !opts.runs(s.name) {
			continue
		}
		if err := s.setup(); err != nil {
			return fmt.Errorf("setting up the %s controller: %w", s.name, err)
		}
	}
	return nil
}

// Every authenticated user may already create SelfSubjectReviews
// (system:basic-user); the rule says so where the operator's rules are read.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// setUpWebhooks registers the admission webhooks, which tell the
// operator's writes from others' by the user its requests arrive as, and,
// when dev serving, the registration of their configurations.
func setUpWebhooks(ctx context.Context, mgr ctrl.Manager, opts *Options, dev *devserve.Server) error {
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("a client to learn the operator's identity: %w", err)
	}
	idCtx, cancel := context.WithTimeout(ctx, startupTimeout)
	user, err := webhookv1alpha1.Identity(idCtx, c)
	cancel()
	if err != nil {
		return err
	}
	if err := webhookv1alpha1.Setup(mgr, webhookv1alpha1.Options{EmulatorOverride: opts.EmulatorPath != "", OperatorUser: user,
		ImagesNamespace: opts.ImagesNamespace}); err != nil {
		return err
	}
	started := mgr.GetWebhookServer().StartedChecker()
	if err := mgr.AddReadyzCheck("webhook", started); err != nil {
		return fmt.Errorf("adding the webhook ready check: %w", err)
	}
	if dev == nil {
		return nil
	}
	registrar := mgr.GetClient()
	if opts.DevServing.Registrar != nil {
		registrar = opts.DevServing.Registrar
	}
	return mgr.Add(&devserve.Registrar{Server: dev, Client: registrar, Started: func() bool { return started(nil) == nil }})
}

// metricsOptions is the metrics server opts asks for: HTTPS behind
// authentication and authorization when secure, with the certificate given
// or one generated (fine for development, not for production).
func metricsOptions(opts *Options, tlsOpts []func(*tls.Config)) metricsserver.Options {
	m := metricsserver.Options{BindAddress: orOff(opts.MetricsAddr), SecureServing: opts.SecureMetrics, TLSOpts: tlsOpts}
	if opts.SecureMetrics {
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	if c := opts.MetricsCert; c.Dir != "" {
		m.CertDir, m.CertName, m.KeyName = c.Dir, c.CertName, c.KeyName
	}
	return m
}

// webhookServer serves the webhooks on opts' port with its certificate
// (reloaded when it changes), or as the dev server does.
func webhookServer(opts *Options, dev *devserve.Server, tlsOpts []func(*tls.Config)) webhook.Server {
	if dev != nil {
		return dev.WebhookServer(webhook.Options{TLSOpts: tlsOpts})
	}
	w := webhook.Options{TLSOpts: tlsOpts, Port: opts.WebhookPort}
	if c := opts.WebhookCert; c.Dir != "" {
		w.CertDir, w.CertName, w.KeyName = c.Dir, c.CertName, c.KeyName
	}
	return webhook.NewServer(w)
}

// orOff is addr, or "0" (controller-runtime's "no server") when empty.
func orOff(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// kindServed says whether the API server serves a kind at its version.
func kindServed(mapper meta.RESTMapper, gvk schema.GroupVersionKind) (bool, error) {
	_, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("asking the API server whether it serves %s: %w", gvk, err)
}
