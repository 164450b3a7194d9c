// Command bench measures claim binding against Kubernetes' own
// PersistentVolume binder. For each size N of -n (200, 1,000 and 2,000 by
// default), against an envtest API server of its own: N claims over N idle
// Ready machines (macvirt) and N PVCs over N PVs (kube-controller-manager's
// persistentvolume-binder-controller with its client rate limit lifted).
// It prints a row per size and side: latency to Bound and to Ready
// (a claim's Mac reachable: Service, EndpointSlice and connection Secret in
// place), binds per second, the mutating requests on a claim's path to
// Bound, the operator's writes, the API server's mutating requests and CPU
// per claim, and this process's CPU; then the ratios per size against the
// targets, the requests by verb and resource, how the rate scales, and the
// operator's memory with 5,000 MacMachines in its cache, measured in a
// process of its own. With -profile-dir it also writes CPU profiles of the
// API server and of the operator's side. Run it with `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/internal/testenv"
)

func main() {
	sizes := flag.String("n", "200,1000,2000", "claims and idle machines (and PVCs and PVs) per side: a comma-separated list, one run per size")
	cacheN := flag.Int("cache-machines", 5000, "MacMachines in the cache for the memory figure (0 skips it)")
	kcm := flag.String("kube-controller-manager", filepath.Join(testenv.RepoRoot(), "bin", "envtest", "kube-controller-manager"),
		"kube-controller-manager binary (make envtest builds it)")
	flag.IntVar(&benchWorkers, "workers", 16, "claim workers of the operator")
	flag.StringVar(&profileDir, "profile-dir", "", "write CPU profiles of the API server and of this process (the operator's side) per size and side here; "+
		"read them with `go tool pprof -top DIR/1000-macvirt-apiserver-*.pprof`")
	memoryNS := flag.String("memory-of", "", "internal: be the operator's process of the memory figure, for the MacMachines of this namespace")
	kubeconfig := flag.String("memory-kubeconfig", "", "internal: the API server of -memory-of")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	if *memoryNS != "" {
		if err := memoryOf(*kubeconfig, *memoryNS); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ns, err := parseSizes(*sizes)
	if err == nil {
		err = run(ns, *cacheN, *kcm)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// parseSizes reads -n.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-n %q: each size must be a positive number, as in -n 200,1000,2000", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// sizeResult is one size's run of both sides.
type sizeResult struct {
	n            int
	ours, theirs result
}

// run measures each size against an API server of its own, so no size
// inherits another's objects, then the memory figure against another.
func run(sizes []int, cacheN int, kcm string) error {
	var results []sizeResult
	for _, n := range sizes {
		fmt.Fprintf(os.Stderr, "bench: %d claims and %d PVCs...\n", n, n)
		r, err := runSize(n, kcm)
		if err != nil {
			return fmt.Errorf("%d claims: %w", n, err)
		}
		results = append(results, r)
	}
	report(results)
	if cacheN <= 0 {
		return nil
	}
	env, _, c, err := startServer()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	return benchMemory(context.Background(), env, c, cacheN)
}

func startServer() (*envtest.Environment, *rest.Config, client.Client, error) {
	scheme, err := macvirtscheme.New()
	if err != nil {
		return nil, nil, nil, err
	}
	env, cfg, err := testenv.Start(scheme)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.QPS, cfg.Burst = -1, -1 // no client-side limit, like the PV binder's lifted one.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, nil, nil, err
	}
	return env, cfg, c, nil
}

func runSize(n int, kcm string) (sizeResult, error) {
	env, cfg, c, err := startServer()
	if err != nil {
		return sizeResult{}, err
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	ours, err := benchClaims(ctx, cfg, c, n)
	if err != nil {
		return sizeResult{}, fmt.Errorf("macvirt side: %w", err)
	}
	theirs, err := benchPVs(ctx, env, c, n, kcm)
	if err != nil {
		return sizeResult{}, fmt.Errorf("PV binder side: %w", err)
	}
	return sizeResult{n: n, ours: ours, theirs: theirs}, nil
}

// result is one side's measurements.
type result struct {
	latencies []time.Duration
	elapsed   time.Duration
	// readyLatencies and readyElapsed are the same until each object is
	// ready for its user: for a claim, its Mac reachable (Ready, its
	// Service routing, its connection Secret written); for a PVC, bound.
	readyLatencies []time.Duration
	readyElapsed   time.Duration
	// toBound is the operator's writes per claim on its way to Bound.
	toBound float64
	// created is how long the n create calls took; no binder can finish
	// sooner, so it bounds binds per second from above.
	created time.Duration
	writes  int64
	// processCPU is this process's CPU seconds (user and system) over the
	// same window as server.
	processCPU float64
	// server is the API server's load from the first create until settle
	// after the last bind, the bench's own creates included.
	server serverLoad
}

func percentile(latencies []time.Duration, p float64) time.Duration {
	s := slices.Clone(latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func (r result) percentile(p float64) time.Duration { return percentile(r.latencies, p) }

func (r result) perSecond() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

func report(results []sizeResult) {
	fmt.Printf("\nbinding N claims over N idle Ready machines / N PVCs over N PVs, one envtest API server per size, %d cores\n\n", runtime.NumCPU())
	fmt.Printf("%6s %-10s %8s %8s %8s %8s %8s | %8s %8s %8s | %9s %9s %9s %9s %9s\n", "N", "side", "p50", "p99", "creates", "total", "binds/s",
		"ready50", "ready99", "ready/s", "to Bound", "op w/cl", "mut/cl", "srv ms/cl", "CPU s/1k")
	row := func(n int, name string, r result, toBound, writes string) {
		fmt.Printf("%6d %-10s %8s %8s %8s %8s %8.1f | %8s %8s %8.1f | %9s %9s %9.2f %9.1f %9.1f\n", n, name,
			r.percentile(0.50).Round(time.Millisecond), r.percentile(0.99).Round(time.Millisecond),
			r.created.Round(time.Millisecond), r.elapsed.Round(time.Millisecond), r.perSecond(),
			percentile(r.readyLatencies, 0.50).Round(time.Millisecond), percentile(r.readyLatencies, 0.99).Round(time.Millisecond),
			float64(len(r.readyLatencies))/r.readyElapsed.Seconds(),
			toBound, writes, r.server.mutating/float64(n), 1000*r.server.cpuSeconds/float64(n), 1000*r.processCPU/float64(n))
	}
	for _, s := range results {
		row(s.n, "macvirt", s.ours, fmt.Sprintf("%.2f", 1+s.ours.toBound), fmt.Sprintf("%.2f", float64(s.ours.writes)/float64(s.n)))
		row(s.n, "PV binder", s.theirs, "n/a", "n/a")
	}
	fmt.Printf("\n(p50, p99, binds/s: from each create to the claim recorded Bound; ready50, ready99, ready/s: to the claim Ready for its tenant\n"+
		" (machine Ready, Service routing, connection Secret written; a PVC is ready when bound); to Bound: mutating requests on a claim's\n"+
		" path to Bound, its create included (the operator's own count); op w/cl: the operator's writes per claim, all of them;\n"+
		" mut/cl and srv ms/cl: the API server's mutating requests and CPU per claim, from the first create to %s after the\n"+
		" last claim was ready, the creates included; CPU s/1k: this process, which runs macvirt's claim controller, the creating clients\n"+
		" and the watch)\n\n", settle)
	for _, s := range results {
		speed := s.ours.perSecond() / s.theirs.perSecond()
		p99 := float64(s.ours.percentile(0.99)) / float64(s.theirs.percentile(0.99))
		ready99 := float64(percentile(s.ours.readyLatencies, 0.99)) / float64(s.theirs.percentile(0.99))
		fmt.Printf("N=%d: binds/s %.2fx the PV binder's%s; p99 %.2f of the PV binder's%s; ready p99 %.2f of the PV binder's p99 to bound%s; "+
			"%.2f mutating requests to Bound (target <= 3: %s)\n",
			s.n, speed, target(s.n, speed, map[int]float64{200: 2.5, 1000: 2}, ">="), p99, target(s.n, p99, map[int]float64{1000: 0.4}, "<="),
			ready99, target(s.n, ready99, map[int]float64{1000: 1}, "<="), 1+s.ours.toBound, verdict(1+s.ours.toBound <= 3))
	}
	fmt.Printf("\nthe API server's mutating requests per claim, by verb and resource (the creates included):\n")
	for _, s := range results {
		fmt.Printf("N=%d macvirt:   %s\n", s.n, breakdown(s.ours.server.byResource, s.n))
		fmt.Printf("N=%d PV binder: %s\n", s.n, breakdown(s.theirs.server.byResource, s.n))
	}
	fmt.Printf("\nand its other requests per claim (reads; the bench's own watch and the metrics it reads included):\n")
	for _, s := range results {
		fmt.Printf("N=%d macvirt:   %.2f in all; %s\n", s.n, total(s.ours.server.reads)/float64(s.n), breakdown(s.ours.server.reads, s.n))
		fmt.Printf("N=%d PV binder: %.2f in all; %s\n", s.n, total(s.theirs.server.reads)/float64(s.n), breakdown(s.theirs.server.reads, s.n))
	}
	if len(results) > 1 {
		first, last := results[0], results[len(results)-1]
		fmt.Printf("\nscale, N=%d against N=%d: macvirt binds/s x%.2f, PV binder binds/s x%.2f (1.00: the rate holds as the work grows)\n",
			last.n, first.n, last.ours.perSecond()/first.ours.perSecond(), last.theirs.perSecond()/first.theirs.perSecond())
	}
}

// breakdown lists the requests per bind, largest first, leaving out what
// is below 0.05 per bind (leases, the bench's own watch relists).
func breakdown(byResource map[string]float64, n int) string {
	keys := make([]string, 0, len(byResource))
	for k := range byResource {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if byResource[a] != byResource[b] {
			return cmpFloat(byResource[b], byResource[a])
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if per := byResource[k] / float64(n); per >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
		}
	}
	if len(parts) == 0 {
		return "none as many as 0.05 per claim"
	}
	return strings.Join(parts, ", ")
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// target says how a figure compares with the target for size n,
// or nothing where there is none.
func target(n int, v float64, targets map[int]float64, cmp string) string {
	t, ok := targets[n]
	if !ok {
		return ""
	}
	met := v >= t
	if cmp == "<=" {
		met = v <= t
	}
	return fmt.Sprintf(" (target %s %.2g: %s)", cmp, t, verdict(met))
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
