// Command macvirt-host-agent runs on an Apple-silicon Mac as a launchd
// daemon. It registers the Mac as a MacHost, heartbeats, and runs the
// MacMachines the operator places on it through lume or tart
// (docs/apple-silicon-hosts.md, docs/design/apple-silicon-runtime.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/macvirt/macvirt/internal/hostagent"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/hostagent/vz/lume"
	"github.com/macvirt/macvirt/internal/hostagent/vz/tart"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "macvirt-host-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	hostname, _ := os.Hostname()
	home, _ := os.UserHomeDir()
	var (
		host        = flag.String("host", strings.ToLower(strings.Split(hostname, ".")[0]), "the MacHost's name (its ServiceAccount in macvirt-hosts has the same name)")
		tool        = flag.String("tool", "tart", "what drives the VMs: lume or tart")
		lumeURL     = flag.String("lume-url", lume.DefaultBaseURL, "lume's API (lume serve)")
		tartBinary  = flag.String("tart", tart.DefaultBinary, "the tart command")
		stateDir    = flag.String("state-dir", filepath.Join(home, "Library", "Application Support", "macvirt"), "where the agent keeps its own files")
		lease       = flag.Duration("lease", time.Minute, "how long the host counts as alive after a heartbeat (it heartbeats 4 times per lease)")
		minFreeDisk = flag.String("min-free-disk", "60Gi", "free disk under which the host reports DiskPressure")
		showVersion = flag.Bool("version", false, "print the version and exit")
	)
	// --kubeconfig (the host's ServiceAccount's kubeconfig) is registered by
	// controller-runtime, which every binary that links it shares; a second
	// registration panics at start. Its help is the host agent's.
	kf := flag.Lookup("kubeconfig")
	if kf == nil {
		return fmt.Errorf("controller-runtime no longer registers --kubeconfig: the host agent must register it")
	}
	kf.Usage = "kubeconfig of the host's ServiceAccount (required)"
	flag.Parse()
	kubeconfig := kf.Value.String()
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	ctrl.SetLogger(zap.New())
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required: the host's ServiceAccount's kubeconfig (docs/apple-silicon-hosts.md)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading --kubeconfig %s: %w", kubeconfig, err)
	}
	if *lease < 10*time.Second || *lease > time.Hour {
		return fmt.Errorf("--lease %s: give between 10s and 1h (MacHost's status.agent.leaseSeconds)", *lease)
	}
	if *host == "" {
		return fmt.Errorf("--host is required: the MacHost's name, its ServiceAccount's in macvirt-hosts")
	}
	q, err := resource.ParseQuantity(*minFreeDisk)
	if err != nil {
		return fmt.Errorf("--min-free-disk %q: %w", *minFreeDisk, err)
	}
	if err := os.MkdirAll(*stateDir, 0o700); err != nil {
		return fmt.Errorf("making --state-dir: %w", err)
	}
	var driver vz.Driver
	switch *tool {
	case "lume":
		driver = lume.New(*lumeURL)
	case "tart":
		if err := os.MkdirAll(filepath.Join(*stateDir, "tart"), 0o700); err != nil {
			return fmt.Errorf("making --state-dir: %w", err)
		}
		driver = tart.New(*tartBinary, filepath.Join(*stateDir, "tart"))
	default:
		return fmt.Errorf("--tool %q: give lume or tart", *tool)
	}
	a, err := hostagent.New(cfg, driver, hostagent.Options{Host: *host, Lease: *lease, MinFreeDisk: &q, Version: version,
		StateDir: filepath.Join(*stateDir, "agent"),
		Facts:    hostagent.MacFacts(*stateDir)})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return a.Start(ctx)
}
