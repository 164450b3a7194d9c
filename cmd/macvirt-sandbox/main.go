// Command macvirt-sandbox runs the whole of macvirt on one machine with
// nothing but Go: a real API server, the operator with its webhooks and
// guest-agent endpoint, and simulated KubeVirt, CDI and macOS guests. It
// applies config/samples and shows the sample claim becoming Ready. See
// docs/sandbox.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/sandbox"
)

func main() {
	if code, played := harness.PlayGuestRole(); played {
		// A simulated guest's CI agent (GitHub's run.sh, buildkite-agent):
		// it plays its role for one job.
		os.Exit(code)
	}
	var opts sandbox.Options
	var machines int
	flag.BoolVar(&opts.UntilReady, "until-ready", false, "exit 0 once the sample claim is Ready (non-zero with the reason after --timeout)")
	flag.DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "how long --until-ready waits (15m with --realistic)")
	flag.IntVar(&machines, "machines", 2, "idle machines the sample pool keeps")
	flag.IntVar(&opts.AppleNodes, "apple-nodes", 0, "simulated Apple nodes of two macOS slots each (0: enough for the samples and three claims)")
	flag.Float64Var(&opts.Speed, "speed", 1, "simulated time scale: 2 imports and boots twice as fast")
	flag.BoolVar(&opts.Realistic, "realistic", false,
		"a real cluster's timings with jitter, still scaled by --speed: imports of minutes with progress every 2 s, a 15 s start, a minute-long boot")
	flag.Int64Var(&opts.Seed, "seed", time.Now().UnixNano(), "seed of --realistic's jitter; the same seed repeats a run's timings")
	verbose := flag.Bool("verbose", false, "show the operator's and the simulator's logs")
	flag.BoolVar(&opts.GitHubFake, "github-fake", false,
		"run a fake GitHub and a runner set against it, and run one GitHub Actions job on a warm Mac (--until-ready waits for its success too)")
	flag.BoolVar(&opts.BuildkiteFake, "buildkite-fake", false,
		"run a fake Buildkite and a Buildkite queue against it, and run one job on a warm Mac (--until-ready waits for its end too)")
	flag.StringVar(&opts.Runtime, "runtime", "kubevirt",
		"kubevirt, or vz to add two fake Apple-silicon Macs (host agents driving a fake tart), a Virtualization class and a claim of it (--until-ready waits for it too)")
	flag.StringVar(&opts.TenantKubeconfig, "tenant-kubeconfig", "", "where to write the tenant's kubeconfig, for kubectl mac (a temporary file by default)")
	// --kubeconfig is registered by controller-runtime; here it says where to
	// write the sandbox's kubeconfig (a temporary file by default).
	flag.Parse()
	if f := flag.Lookup("kubeconfig"); f != nil {
		opts.Kubeconfig = f.Value.String()
	}
	if opts.Realistic && !flagSet("timeout") {
		// A realistic import, start and boot take about five minutes.
		opts.Timeout = 15 * time.Minute
	}
	if machines < 0 || machines > 50 {
		_, _ = fmt.Fprintln(os.Stderr, "macvirt-sandbox: --machines must be between 0 and 50")
		os.Exit(2)
	}
	opts.Machines = int32(machines) //nolint:gosec // bounded above.
	if opts.Runtime != "kubevirt" && opts.Runtime != sandbox.RuntimeVZ {
		_, _ = fmt.Fprintln(os.Stderr, "macvirt-sandbox: --runtime must be kubevirt or vz")
		os.Exit(2)
	}
	level := zap.Level(zapLevel(*verbose))
	ctrl.SetLogger(zap.New(level))
	opts.Out = os.Stdout
	if opts.GitHubFake || opts.BuildkiteFake {
		self, err := os.Executable()
		if err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "macvirt-sandbox: finding its own binary for the guests' runner and agent:", err)
			os.Exit(1)
		}
		opts.RunnerCommand = self
	}
	if info, err := os.Stdout.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
		opts.Live = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := sandbox.Run(ctx, opts)
	stop()
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "macvirt-sandbox:", err)
		os.Exit(1)
	}
}

// flagSet reports whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// zapLevel keeps the operator's logs out of the progress table unless
// verbose: the table shows every object's Ready message, and the logs of
// optimistic-concurrency retries would only alarm.
func zapLevel(verbose bool) zapcore.Level {
	if verbose {
		return zapcore.InfoLevel
	}
	return zapcore.DPanicLevel
}
