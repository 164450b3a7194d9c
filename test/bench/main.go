// Command bench measures claim binding against Kubernetes' own
// PersistentVolume binder, in one run against one envtest API server:
// 200 claims over 200 idle machines (macvirt) and 200 PVCs over 200 PVs
// (kube-controller-manager's persistentvolume-binder-controller with its
// client rate limit lifted). It prints latency percentiles, binds per
// second, API writes per bind and the ratios, then the manager's memory
// with 5,000 MacMachines in its cache. Run it with `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/internal/testenv"
)

func main() {
	n := flag.Int("n", 200, "claims and idle machines (and PVCs and PVs) per side")
	cacheN := flag.Int("cache-machines", 5000, "MacMachines in the cache for the memory figure (0 skips it)")
	kcm := flag.String("kube-controller-manager", filepath.Join(testenv.RepoRoot(), "bin", "envtest", "kube-controller-manager"),
		"kube-controller-manager binary (make envtest builds it)")
	flag.IntVar(&benchWorkers, "workers", 16, "claim workers of the operator")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	if err := run(*n, *cacheN, *kcm); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, cacheN int, kcm string) error {
	scheme, err := macvirtscheme.New()
	if err != nil {
		return err
	}
	env, cfg, err := testenv.Start(scheme)
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = -1, -1 // no client-side limit, like the PV binder's lifted one.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx := context.Background()

	ours, err := benchClaims(ctx, cfg, c, n)
	if err != nil {
		return fmt.Errorf("macvirt side: %w", err)
	}
	theirs, err := benchPVs(ctx, env, c, n, kcm)
	if err != nil {
		return fmt.Errorf("PV binder side: %w", err)
	}
	report(n, ours, theirs)
	if cacheN > 0 {
		return benchMemory(ctx, cfg, c, cacheN)
	}
	return nil
}

// result is one side's measurements.
type result struct {
	latencies []time.Duration
	elapsed   time.Duration
	// created is how long the n create calls took; no binder can finish
	// sooner, so it bounds binds per second from above.
	created time.Duration
	writes  int64
	// server is the API server's load from the first create until settle
	// after the last bind, the bench's own creates included.
	server serverLoad
}

func (r result) percentile(p float64) time.Duration {
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (r result) perSecond() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

func report(n int, ours, theirs result) {
	fmt.Printf("\nbinding %d claims over %d idle machines / %d PVCs over %d PVs, one envtest API server, 2 cores\n\n", n, n, n, n)
	fmt.Printf("%-34s %10s %10s %10s %10s %10s %16s\n", "", "p50", "p99", "creates", "total", "binds/s", "API writes/bind")
	row := func(name string, r result, writes string) {
		fmt.Printf("%-34s %10s %10s %10s %10s %10.1f %16s\n", name, r.percentile(0.50).Round(time.Millisecond),
			r.percentile(0.99).Round(time.Millisecond), r.created.Round(time.Millisecond), r.elapsed.Round(time.Millisecond), r.perSecond(), writes)
	}
	row("macvirt MacClaim binder", ours, fmt.Sprintf("%.2f", float64(ours.writes)/float64(n)))
	row("kube-controller-manager PV binder", theirs, "n/a")
	fmt.Printf("\nAPI server, from the first create to %s after the last bind (the %d creates included):\n", settle, n)
	fmt.Printf("%-34s %22s %22s\n", "", "mutating requests/bind", "server CPU ms/bind")
	load := func(name string, r result) {
		fmt.Printf("%-34s %22.2f %22.1f\n", name, r.server.mutating/float64(n), 1000*r.server.cpuSeconds/float64(n))
	}
	load("macvirt MacClaim binder", ours)
	load("kube-controller-manager PV binder", theirs)
	speed := ours.perSecond() / theirs.perSecond()
	p99 := float64(ours.percentile(0.99)) / float64(theirs.percentile(0.99))
	fmt.Printf("\nratios: binds/s %.2fx the PV binder (target >= 3x: %s); p99 %.2f of the PV binder's (target <= 0.33: %s); writes/bind %.2f (target <= 3: %s)\n",
		speed, verdict(speed >= 3), p99, verdict(p99 <= 1.0/3), float64(ours.writes)/float64(n), verdict(float64(ours.writes)/float64(n) <= 3))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// benchWorkers is the claim workers; set by -workers.
var benchWorkers = 16

// creators is how many goroutines create objects at once.
const creators = 20

// parallel runs f(0..n-1) on creators goroutines.
func parallel(n int, f func(int) error) error {
	var wg sync.WaitGroup
	var first atomic.Value
	next := make(chan int)
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

func managerFor(cfg *rest.Config) (ctrl.Manager, error) {
	scheme, err := macvirtscheme.New()
	if err != nil {
		return nil, err
	}
	return ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
}
