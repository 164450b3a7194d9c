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
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
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
	// "macvirt-host-agent doctor [flags]" checks the Mac with the flags the
	// agent runs with, and starts nothing.
	doctor := len(os.Args) > 1 && os.Args[1] == "doctor"
	if doctor {
		os.Args = append(os.Args[:1:1], os.Args[2:]...)
	}
	hostname, _ := os.Hostname()
	home, _ := os.UserHomeDir()
	var (
		host        = flag.String("host", strings.ToLower(strings.Split(hostname, ".")[0]), "the MacHost's name (its ServiceAccount in macvirt-hosts has the same name)")
		tool        = flag.String("tool", "tart", "what drives the VMs: lume or tart")
		lumeURL     = flag.String("lume-url", lume.DefaultBaseURL, "lume's API (lume serve)")
		lumeBinary  = flag.String("lume", "lume", "lume's command, for lume shutdown")
		lumeUser    = flag.String("lume-guest-user", "", "the guests' administrator, as whom lume shutdown asks macOS to shut down over SSH; unset, only the guest agent is asked")
		lumePWFile  = flag.String("lume-guest-password-file", "", "a file holding --lume-guest-user's password (lume takes it on its command line)")
		tartBinary  = flag.String("tart", tart.DefaultBinary, "the tart command")
		stateDir    = flag.String("state-dir", filepath.Join(home, "Library", "Application Support", "macvirt"), "where the agent keeps its own files")
		lease       = flag.Duration("lease", time.Minute, "how long the host counts as alive after a heartbeat (it heartbeats 4 times per lease)")
		minFreeDisk = flag.String("min-free-disk", "60Gi", "free disk under which the host reports DiskPressure")
		endpoint    = flag.String("endpoint", "", "the operator's agent endpoint, https://host:port, as this Mac reaches it (the address its guests are given)")
		endpointCA  = flag.String("endpoint-ca", "", "a PEM file of the CA the agent endpoint's certificate chains to")
		serverName  = flag.String("endpoint-server-name", "", "the name the endpoint's certificate is checked against, when not the endpoint's host")
		maxPulls    = flag.Int("max-pulls", hostagent.DefaultMaxPulls, "how many images the agent pulls at once (tart pulls from one registry one at a time whatever this says); a VM of a cached image never waits for them")
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
	if doctor {
		return runDoctor(doctorFlags{host: *host, tool: *tool, lumeURL: *lumeURL, lume: *lumeBinary, lumeGuestUser: *lumeUser, tart: *tartBinary, stateDir: *stateDir,
			minFreeDisk: *minFreeDisk, kubeconfig: kubeconfig, endpoint: *endpoint, endpointCA: *endpointCA, serverName: *serverName})
	}
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
	if *maxPulls < 1 || *maxPulls > 16 {
		return fmt.Errorf("--max-pulls %d: give between 1 and 16", *maxPulls)
	}
	if *host == "" {
		return fmt.Errorf("--host is required: the MacHost's name, its ServiceAccount's in macvirt-hosts")
	}
	if *endpoint == "" || *endpointCA == "" {
		return fmt.Errorf("--endpoint and --endpoint-ca are required: the operator's agent endpoint, where each VM's configuration is fetched (docs/apple-silicon-hosts.md)")
	}
	ca, err := os.ReadFile(*endpointCA)
	if err != nil {
		return fmt.Errorf("reading --endpoint-ca: %w", err)
	}
	token, err := hostToken(cfg)
	if err != nil {
		return err
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
		ld := lume.New(*lumeURL)
		ld.StateDir = filepath.Join(*stateDir, "lume")
		_, lookErr := exec.LookPath(*lumeBinary)
		if lookErr == nil {
			ld.Binary = *lumeBinary // its version; lume shutdown too with a guest user
		}
		if *lumeUser != "" {
			pw, err := os.ReadFile(*lumePWFile)
			if err != nil {
				return fmt.Errorf("--lume-guest-user needs --lume-guest-password-file: %w", err)
			}
			if lookErr != nil {
				return fmt.Errorf("--lume %q: %w; give lume's full path for lume shutdown", *lumeBinary, lookErr)
			}
			ld.GuestUser, ld.GuestPassword = *lumeUser, strings.TrimSpace(string(pw))
		}
		driver = ld
	case "tart":
		// launchd gives a daemon no HOME, and a PATH without Homebrew's.
		if os.Getenv("HOME") == "" && os.Getenv("TART_HOME") == "" {
			return fmt.Errorf("HOME is not set, and tart keeps its VMs under ~/.tart: set HOME (a LaunchDaemon's EnvironmentVariables; docs/apple-silicon-hosts.md)")
		}
		if _, err := exec.LookPath(*tartBinary); err != nil {
			return fmt.Errorf("--tart %q: %w; give tart's full path (Homebrew installs it as /opt/homebrew/bin/tart), or add its directory to PATH", *tartBinary, err)
		}
		if err := os.MkdirAll(filepath.Join(*stateDir, "tart"), 0o700); err != nil {
			return fmt.Errorf("making --state-dir: %w", err)
		}
		driver = tart.New(*tartBinary, filepath.Join(*stateDir, "tart"))
	default:
		return fmt.Errorf("--tool %q: give lume or tart", *tool)
	}
	a, err := hostagent.New(cfg, driver, hostagent.Options{Host: *host, Lease: *lease, MinFreeDisk: &q, Version: version,
		StateDir: filepath.Join(*stateDir, "agent"), MaxPulls: *maxPulls,
		Facts:    hostagent.MacFacts(*stateDir),
		Endpoint: &hostagent.Endpoint{URL: *endpoint, CABundle: ca, ServerName: *serverName, Token: token}})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return a.Start(ctx)
}

// hostToken returns how the agent reads its ServiceAccount's token: the
// operator's endpoint reviews it before it hands out a VM's configuration.
// A token file (tokenFile in the kubeconfig) is read again each time, so a
// renewed token counts at once.
func hostToken(cfg *rest.Config) (func() (string, error), error) {
	switch {
	case cfg.BearerTokenFile != "":
		file := cfg.BearerTokenFile
		return func() (string, error) {
			b, err := os.ReadFile(file) //nolint:gosec // the kubeconfig's own token file.
			return strings.TrimSpace(string(b)), err
		}, nil
	case cfg.BearerToken != "":
		token := cfg.BearerToken
		return func() (string, error) { return token, nil }, nil
	}
	return nil, fmt.Errorf("the --kubeconfig holds no token: give the host's ServiceAccount token (kubectl create token), which the operator's endpoint also checks")
}
