package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// Options say what a world holds. The zero value is a test cluster
// (envtest's API server and etcd with every CRD, and KubeVirt's own virt-api
// and virt-controller) with an administrator's client, and nothing at work
// in it.
type Options struct {
	// Log receives controller-runtime's log (the operator's, the
	// simulator's, the guests'), in development format; nil leaves the
	// process's logger as it is.
	Log io.Writer
	// KubeVirt configures KubeVirt's control plane and the CRDs installed;
	// its FeatureGates are KubeVirtFeatureGates when nil.
	KubeVirt cluster.KubeVirtOptions
	// Scheme adds kinds to macvirt's scheme, for what a test reads that the
	// operator does not (CustomResourceDefinitions, say).
	Scheme []func(*runtime.Scheme) error
	// StrictFieldValidation makes Admin's writes fail on an unknown field
	// instead of the API server pruning it.
	StrictFieldValidation bool

	// System runs macvirt at work: the simulator (KubeVirt's nodes, CDI,
	// macOS guests) and the operator with its webhooks, agent endpoint and,
	// with Network, its tunnel. Nil runs neither.
	System *SystemOptions
	// Simulator runs the simulator alone, with exactly these options, for a
	// suite that starts operators of its own; not with System.
	Simulator *simulator.Options
	// OperatorAccount runs the System's operator as its service account
	// under the shipped RBAC (config/rbac's role.yaml, and config/tunnel's
	// Role in kube-system), impersonated, instead of as the administrator.
	// OperatorConnection, when set, is handed that connection before the
	// operator starts (to record its requests, say).
	OperatorAccount    bool
	OperatorConnection func(*rest.Config)

	// GitHub runs a fake GitHub with these options, and puts GitHub's
	// runner, played by GuestCommand, into every guest's golden image.
	GitHub *fakegithub.Options
	// Buildkite runs a fake Buildkite, and puts buildkite-agent, played by
	// GuestCommand, into every guest's golden image at BuildkiteAgentPath.
	Buildkite *BuildkiteOptions
	// GuestCommand is the program the guests' CI agents exec with a role
	// (PlayGuestRole); this process's own binary when empty.
	GuestCommand string

	// Samples applies config/samples and what they need of a cluster
	// (ApplySamples) once the operator runs.
	Samples *SampleOptions
	// CIClass creates CIClass, the sample class for CI.
	CIClass bool
	// Tenant makes TenantUser a tenant of TenantNamespace with the shipped
	// roles (SetUpTenant), and creates TenantClass for it to claim from.
	Tenant bool
}

// SampleOptions say how config/samples are applied.
type SampleOptions struct {
	// Machines is the sample pool's idle target; the sample's when zero.
	Machines int32
}

// World is a test cluster with macvirt at work in it, started by Start
// in one call and stopped by Stop.
type World struct {
	// Ctx ends when the world stops.
	Ctx context.Context
	// Cluster is the API server, etcd and KubeVirt's control plane, and
	// Config an administrator's connection to it.
	Cluster *cluster.Cluster
	Config  *rest.Config
	// Scheme is macvirt's scheme with Options.Scheme's kinds.
	Scheme *runtime.Scheme
	// Admin is an administrator's client.
	Admin client.WithWatch
	// System is macvirt at work (Options.System); nil without it.
	System *System
	// Simulator plays KubeVirt's nodes, CDI and the guests (the System's,
	// or the one of Options.Simulator); tests inject faults with it.
	Simulator *simulator.Simulator
	// GitHub and Buildkite are the fakes Options asked for, nil otherwise.
	GitHub    *fakegithub.Server
	Buildkite *fakebuildkite.Server

	cancel       context.CancelFunc
	simStopped   <-chan struct{}
	stopped      bool
	operatorUser string
}

// Start starts the world opts describe, to run until ctx ends or Stop, and
// returns once all of it answers (the operator's webhooks, the tunnel, the
// samples applied). On an error whatever had started is stopped again.
func Start(ctx context.Context, opts Options) (w *World, err error) {
	if opts.System != nil && opts.Simulator != nil {
		return nil, errors.New("harness: Options.System runs a simulator of its own; Options.Simulator is for worlds without a System")
	}
	if opts.Log != nil {
		logf.SetLogger(zap.New(zap.WriteTo(opts.Log), zap.UseDevMode(true)))
	}
	w = &World{}
	defer func() {
		if err != nil {
			_ = w.Stop()
			w = nil
		}
	}()
	if w.Scheme, err = macvirtscheme.New(); err != nil {
		return w, err
	}
	for _, add := range opts.Scheme {
		if err := add(w.Scheme); err != nil {
			return w, err
		}
	}
	kv := opts.KubeVirt
	if kv.FeatureGates == nil {
		kv.FeatureGates = KubeVirtFeatureGates
	}
	if w.Cluster, err = cluster.StartWithKubeVirt(w.Scheme, kv); err != nil {
		return w, err
	}
	w.Config = w.Cluster.Config
	if w.Admin, err = client.NewWithWatch(w.Config, client.Options{Scheme: w.Scheme}); err != nil {
		return w, err
	}
	if opts.StrictFieldValidation {
		w.Admin = strictClient{Client: client.WithFieldValidation(w.Admin, metav1.FieldValidationStrict), watcher: w.Admin}
	}
	w.Ctx, w.cancel = context.WithCancel(ctx)

	command := opts.GuestCommand
	if command == "" && (opts.GitHub != nil || opts.Buildkite != nil) {
		if command, err = os.Executable(); err != nil {
			return w, fmt.Errorf("finding this binary, which the guests' CI agents run: %w", err)
		}
	}
	if opts.GitHub != nil {
		w.GitHub = fakegithub.New(*opts.GitHub)
	}
	if opts.Buildkite != nil {
		w.Buildkite = fakebuildkite.New(opts.Buildkite.Token, opts.Buildkite.Queue)
	}

	switch {
	case opts.System != nil:
		sysOpts := *opts.System
		sysOpts.GuestFiles = ciGuestFiles(command, opts.GitHub != nil, opts.Buildkite != nil)
		maps.Copy(sysOpts.GuestFiles, opts.System.GuestFiles)
		if opts.OperatorAccount {
			if sysOpts.operatorConfig, err = w.operatorAccount(); err != nil {
				return w, fmt.Errorf("the operator's service account: %w", err)
			}
			if opts.OperatorConnection != nil {
				opts.OperatorConnection(sysOpts.operatorConfig)
			}
		}
		if w.System, err = startSystem(w.Ctx, w.Cluster, w.Scheme, w.Admin, sysOpts); err != nil {
			return w, err
		}
		w.Simulator = w.System.Simulator
		if opts.OperatorAccount && w.System.OperatorUser != w.operatorUser {
			return w, fmt.Errorf("the operator runs as %q, not as its service account %q", w.System.OperatorUser, w.operatorUser)
		}
	case opts.Simulator != nil:
		sim, start, err := newSimulator(w.Cluster, w.Scheme, *opts.Simulator)
		if err != nil {
			return w, err
		}
		w.Simulator, w.simStopped = sim, start(w.Ctx)
	case opts.OperatorAccount:
		return w, errors.New("harness: Options.OperatorAccount says how the System's operator runs; there is no System")
	}

	if opts.Samples != nil {
		if err := ApplySamples(w.Ctx, w.Admin, opts.Samples.Machines); err != nil {
			return w, fmt.Errorf("applying config/samples: %w", err)
		}
	}
	if opts.CIClass {
		if err := ApplyCIClass(w.Ctx, w.Admin); err != nil {
			return w, err
		}
	}
	if opts.Tenant {
		if err := SetUpTenant(w.Ctx, w.Admin, TenantUser, TenantNamespace); err != nil {
			return w, err
		}
		if err := ApplyTenantClass(w.Ctx, w.Admin); err != nil {
			return w, err
		}
	}
	return w, nil
}

// T is what ForTest needs of a test: a *testing.T, or a Ginkgo suite's
// GinkgoT().
type T interface {
	Helper()
	Skip(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Log(args ...any)
	Failed() bool
	Cleanup(func())
}

// ForTest starts the world for t, or skips t in the unit run (go test
// -short, which starts no API server), and stops it when t ends: in a
// Ginkgo suite's BeforeSuite, with GinkgoT(), when the suite ends. A test
// that failed gets what KubeVirt's processes printed.
func ForTest(t T, opts Options) *World {
	t.Helper()
	cluster.NeedsAPIServer(t)
	w, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the test world: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(w.Cluster.KubeVirtLogs())
		}
		if err := w.Stop(); err != nil {
			t.Errorf("stopping the test world: %v", err)
		}
	})
	return w
}

// Stop stops everything the world runs, the API server last, and waits
// for it. A second Stop does nothing.
func (w *World) Stop() error {
	if w.stopped {
		return nil
	}
	w.stopped = true
	if w.cancel != nil {
		w.cancel()
	}
	if w.System != nil {
		w.System.Stop()
	}
	if w.simStopped != nil {
		<-w.simStopped
	}
	if w.GitHub != nil {
		w.GitHub.Close()
	}
	if w.Buildkite != nil {
		w.Buildkite.Close()
	}
	if w.Cluster != nil {
		return w.Cluster.Stop()
	}
	return nil
}

// strictClient is a client whose writes fail on unknown fields, and which
// watches as watcher does.
type strictClient struct {
	client.Client
	watcher client.WithWatch
}

func (c strictClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	return c.watcher.Watch(ctx, list, opts...)
}
