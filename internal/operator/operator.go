// Package operator wires macvirt's controllers into a controller-runtime
// manager. cmd/main.go and the integration tests call the same Setup, so
// the tests exercise the wiring that ships.
package operator

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/macvirt/macvirt/internal/controller"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/vmstop"
)

// DefaultHookImage is the domain-hook sidecar image used when none is set.
const DefaultHookImage = "ghcr.io/macvirt/macvirt-domain-hook:v0.1.0"

// Options configure the operator.
type Options struct {
	// HookImage is the domain-hook sidecar image put on every VM.
	HookImage string
	// EmulatorPath optionally overrides the node's QEMU binary.
	EmulatorPath string
	// StopConfig is where the stop subresource is called; the manager's
	// API server when nil. Tests point it at a stand-in of virt-api.
	StopConfig *rest.Config
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// NameSuffix is appended to controller names so several managers can run
	// in one process (tests).
	NameSuffix string
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
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	hookImage := opts.HookImage
	if hookImage == "" {
		hookImage = DefaultHookImage
	}
	if err := (&controller.MacMachineReconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       mgr.GetEventRecorder("macvirt-machine-controller"),
		Stopper:        stopper,
		Render:         render.Options{HookImage: hookImage, EmulatorPath: opts.EmulatorPath},
		Clock:          opts.Clock,
		ControllerName: "macmachine" + opts.NameSuffix,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MacMachine controller: %w", err)
	}
	return controller.RegisterMetrics(mgr.GetCache())
}
