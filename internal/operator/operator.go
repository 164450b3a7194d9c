// Package operator wires macvirt's controllers into a controller-runtime
// manager. cmd/main.go and the integration tests call the same Setup, so
// the tests exercise the wiring that ships.
package operator

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/claim"
	"github.com/macvirt/macvirt/internal/controller/class"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/machine"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/nodeslots"
	"github.com/macvirt/macvirt/internal/controller/pool"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/guestagent/endpoint"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/vmstop"
	webhookv1alpha1 "github.com/macvirt/macvirt/internal/webhook/v1alpha1"
)

// DefaultNamespace is the operator's namespace when none is set: the one
// config/default installs it in.
const DefaultNamespace = "macvirt-system"

// Options configure the operator.
type Options struct {
	// Namespace is the namespace the operator runs in, where it keeps its
	// class snapshots (DefaultNamespace when empty). Its RBAC grants it
	// controllerrevisions and Secrets there only.
	Namespace string
	// DomainHook is the transport of the macOS domain settings (the
	// --domain-hook flag); auto when empty: a KubeVirt Plugin of CEL hooks
	// where KubeVirt serves the Plugin kind, KubeVirt's hook sidecar
	// elsewhere.
	DomainHook contract.Transport
	// HookImage is the domain-hook image: KubeVirt's hook sidecar on every
	// VM, or the Plugin's sidecar (plugin-sidecar). When empty, the one for
	// the cluster's KubeVirt minor (install.ChooseImage).
	HookImage string
	// LookupEnv reads the RELATED_IMAGE_* variables install.ChooseImage looks
	// at (os.LookupEnv in the manager); none are read when nil.
	LookupEnv func(string) (string, bool)
	// MonitoringObjects has the operator write its ServiceMonitor and alerts
	// into Namespace where the cluster serves those kinds (MonitoringObjects;
	// the OLM bundle turns it on).
	MonitoringObjects bool
	// EmulatorPath optionally overrides the node's QEMU binary.
	EmulatorPath string
	// StopConfig is where the stop subresource is called; the manager's
	// API server when nil. Tests point it at a stand-in of virt-api.
	StopConfig *rest.Config
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Controllers selects the controllers to run; all when empty. Tests run
	// a subset (for example only claims, against hand-made machines).
	Controllers []Controller
	// WrapClient, when set, wraps the manager's client for the controllers
	// (tests inject conflicts and stale lists with it).
	WrapClient func(client.Client) client.Client
	// ClaimWorkers is the number of claims bound in parallel (default 16).
	ClaimWorkers int
	// ConnectionResync is how often Ready claims' connection Secrets are
	// applied again (claim.DefaultConnectionResync when zero).
	ConnectionResync time.Duration
	// Agent is the guest-agent endpoint written into every machine's
	// config disk.
	Agent endpoint.Address
	// AgentListeningSince reports when that endpoint began to listen (the
	// agent server's ListeningSince); the operator's start when nil.
	AgentListeningSince func() time.Time
	// AgentHandler, when set, is the guest-agent endpoint's handler; Setup
	// has it find a machine's class as the machine controller does, so an
	// agent's heartbeat interval suits the timeout its machine is held to.
	AgentHandler *endpoint.Handler
	// Webhooks registers the admission webhooks with the manager's webhook
	// server (cmd/main.go does; the controller tests run without them).
	Webhooks bool
	// NameSuffix is appended to controller names so several managers can run
	// in one process (tests).
	NameSuffix string
}

// Controller names one of the operator's controllers.
type Controller string

// The operator's controllers.
const (
	MachineController Controller = "machine"
	ClassController   Controller = "class"
	PoolController    Controller = "pool"
	ClaimController   Controller = "claim"
	// NodeController advertises the macOS slots of Apple-hardware nodes.
	NodeController Controller = "node"
)

func (o Options) runs(c Controller) bool {
	return len(o.Controllers) == 0 || slices.Contains(o.Controllers, c)
}

// Setup registers macvirt's controllers and metrics with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	stopCfg := opts.StopConfig
	if stopCfg == nil {
		stopCfg = mgr.GetConfig()
	}
	stopper, err := vmstop.NewRESTStopper(stopCfg, nil)
	if err != nil {
		return err
	}
	if opts.ClaimWorkers <= 0 {
		opts.ClaimWorkers = 16
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	hookClient, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("a client to choose the domain-hook transport: %w", err)
	}
	var kubevirtVersion string
	if opts.HookImage == "" {
		// Its own budget: a KubeVirt CR that does not yet report its
		// version (a fresh install) is read again for a little while.
		versionCtx, cancelVersion := context.WithTimeout(context.Background(), 15*time.Second)
		kubevirtVersion, err = install.WaitForKubeVirtVersion(versionCtx, hookClient, time.Second)
		cancelVersion()
		if err != nil {
			mgr.GetLogger().Info("The cluster's KubeVirt version is unknown", "reason", err.Error())
		}
	}
	resolveCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	hookChoice := install.ChooseImage(opts.HookImage, opts.LookupEnv, kubevirtVersion)
	mgr.GetLogger().Info("Domain-hook image", "image", hookChoice.Image, "why", hookChoice.Why, "mayNotSuitKubeVirt", hookChoice.Warning)
	hookImage := hookChoice.Image
	hookOpts := install.Options{HookImage: hookImage, EmulatorPath: opts.EmulatorPath}
	transport, err := install.Resolve(resolveCtx, mgr.GetRESTMapper(), hookClient, opts.DomainHook, hookOpts)
	cancel()
	if err != nil {
		return err
	}
	mgr.GetLogger().Info("Domain-hook transport", "asked", opts.DomainHook, "transport", transport)
	var hookObjects *install.Objects
	if opts.runs(MachineController) {
		hookObjects = &install.Objects{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Transport: transport,
			Options: hookOpts, Log: mgr.GetLogger().WithName("domain-hook")}
		if err := mgr.Add(hookObjects); err != nil {
			return err
		}
	}
	if opts.MonitoringObjects {
		if err := mgr.Add(&MonitoringObjects{Client: mgr.GetClient(), Mapper: mgr.GetRESTMapper(), Namespace: opts.Namespace,
			Log: mgr.GetLogger().WithName("monitoring")}); err != nil {
			return err
		}
	}
	if err := index.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	c := mgr.GetClient()
	if opts.WrapClient != nil {
		c = opts.WrapClient(c)
	}
	var snapshots client.Reader
	if opts.runs(MachineController) || opts.AgentHandler != nil {
		if snapshots, err = snapshotCache(mgr, opts.Namespace); err != nil {
			return err
		}
	}
	if opts.AgentHandler != nil {
		opts.AgentHandler.Classes = classhistory.Resolver{Snapshots: snapshots, Namespace: opts.Namespace}
	}
	setups := []struct {
		name  Controller
		setup func() error
	}{
		{MachineController, func() error {
			return (&machine.Reconciler{
				Client:         c,
				APIReader:      mgr.GetAPIReader(),
				Classes:        classhistory.Resolver{Classes: c, Snapshots: snapshots, Namespace: opts.Namespace},
				Recorder:       mgr.GetEventRecorder("macvirt-machine-controller"),
				Stopper:        stopper,
				Render:         render.Options{DomainHook: transport, HookImage: hookImage, EmulatorPath: opts.EmulatorPath},
				DomainHook:     hookObjects.Ready,
				Agent:          opts.Agent,
				ListeningSince: opts.AgentListeningSince,
				Clock:          opts.Clock,
				ControllerName: "macmachine" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{ClassController, func() error {
			return (&class.Reconciler{
				Client:         c,
				APIReader:      mgr.GetAPIReader(),
				Namespace:      opts.Namespace,
				ControllerName: "macclass" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{PoolController, func() error {
			return (&pool.Reconciler{
				Client:         c,
				Clock:          opts.Clock,
				Recorder:       mgr.GetEventRecorder("macvirt-pool-controller"),
				ControllerName: "macpool" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{ClaimController, func() error {
			return (&claim.Reconciler{
				Client:                  c,
				APIReader:               mgr.GetAPIReader(),
				Recorder:                mgr.GetEventRecorder("macvirt-claim-controller"),
				Clock:                   opts.Clock,
				MaxConcurrentReconciles: opts.ClaimWorkers,
				ConnectionResync:        opts.ConnectionResync,
				ControllerName:          "macclaim" + opts.NameSuffix,
			}).SetupWithManager(mgr)
		}},
		{NodeController, func() error {
			return (&nodeslots.Reconciler{
				Client:         c,
				Recorder:       mgr.GetEventRecorder("macvirt-node-controller"),
				ControllerName: "nodeslots" + opts.NameSuffix,
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
	if opts.Webhooks {
		user, err := operatorUser(mgr)
		if err != nil {
			return err
		}
		if err := webhookv1alpha1.Setup(mgr, webhookv1alpha1.Options{EmulatorOverride: opts.EmulatorPath != "", OperatorUser: user}); err != nil {
			return err
		}
	}
	return metrics.Register(mgr.GetCache())
}

// CacheOptions is how the operator's manager caches: Services and
// EndpointSlices only when they carry macvirt.io/claim (each claim's own),
// NetworkPolicies only when they carry macvirt.io/machine (each machine's
// own), not every one of the cluster. A manager made without them works, caching
// all of them.
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(macvirtv1alpha1.LabelClaim, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	sel := labels.NewSelector().Add(*req)
	machineReq, err := labels.NewRequirement(macvirtv1alpha1.LabelMachine, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Service{}:             {Label: sel},
		&discoveryv1.EndpointSlice{}:  {Label: sel},
		&networkingv1.NetworkPolicy{}: {Label: labels.NewSelector().Add(*machineReq)},
	}}
}

// Every authenticated user may already create SelfSubjectReviews
// (system:basic-user); the rule says so where the operator's rules are read.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// operatorUser asks the API server which user the manager's requests arrive
// under, for the machine webhook to tell the operator's writes from others'.
func operatorUser(mgr ctrl.Manager) (string, error) {
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return "", fmt.Errorf("a client to learn the operator's identity: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return webhookv1alpha1.Identity(ctx, c)
}

// snapshotCache is a cache of the class snapshots in the operator's
// namespace, started with the manager's caches. Machines of a deleted or
// changed class read their snapshot on every reconcile and every heartbeat;
// the manager's own cache cannot hold them, as it watches cluster-wide and
// the operator may read controllerrevisions in its own namespace only.
func snapshotCache(mgr ctrl.Manager, namespace string) (client.Reader, error) {
	tracked, err := labels.NewRequirement(macvirtv1alpha1.LabelClassRevision, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selecting class snapshots: %w", err)
	}
	c, err := cluster.New(mgr.GetConfig(), func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.HTTPClient = mgr.GetHTTPClient()
		o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mgr.GetRESTMapper(), nil }
		o.Cache = cache.Options{
			DefaultNamespaces:           map[string]cache.Config{namespace: {}},
			DefaultLabelSelector:        labels.NewSelector().Add(*tracked),
			ReaderFailOnMissingInformer: true,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the class snapshot cache: %w", err)
	}
	// Registered now, so the manager waits for it to sync before it starts
	// the controllers, instead of a reconcile waiting on its first read.
	if _, err := c.GetCache().GetInformer(context.Background(), &appsv1.ControllerRevision{}); err != nil {
		return nil, fmt.Errorf("watching class snapshots: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the class snapshot cache: %w", err)
	}
	return c.GetCache(), nil
}
