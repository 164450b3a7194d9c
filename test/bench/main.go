// Command bench measures claim binding against Kubernetes' own
// PersistentVolume binder, and prints what it measured.
//
// For each size N of -n (200, 1,000 and 2,000 by default) it makes -runs
// runs (3), each against a fresh envtest API server of its own, the two
// sides in alternating order (run 1 macvirt then the PV binder, run 2 the
// PV binder then macvirt, and so on):
//
//   - macvirt: N claims over N Ready idle machines, each with the
//     NetworkPolicy the machine controller makes for an unbound machine;
//     the claim and exposure controllers run in the operator's process, a
//     process of its own (this binary again).
//   - the PV binder: N PVCs over N PVs, kube-controller-manager running
//     only its persistentvolume-binder-controller, client rate limit
//     lifted. It runs one claim worker and one volume worker (no flag adds
//     more), so binds per second compares concurrency as much as
//     efficiency: the API server's CPU and requests per claim are the
//     headline.
//
// Before a side is timed its binder runs, its setup is done (for the PV
// binder, every PV Available) and the API server is idle (no mutating
// request for a second). The side's window runs from its first create
// until a second after its last object is ready; over it the bench reads
// the API server's CPU and requests from its /metrics, and the binder's
// process CPU (utime and stime of /proc/<pid>/stat, for the operator's
// process and kube-controller-manager alike). Each claim is timed from
// its create call to the first watch event showing it bound (for a claim,
// its machine's spec.claimRef naming it; for a PVC, Bound) and showing it
// ready (for a claim, its Ready condition True; a PVC is ready when
// bound). The operator's process counts its own writes, per claim up to
// the binding and up to Ready.
//
// It prints each run's figures, then the median of the runs per figure
// and size, in three rows: macvirt bind-only (to the machine's claimRef),
// macvirt bind-plus-reachable (to Ready) and the PV binder (to Bound);
// the figures against the targets; the API server's requests by verb and
// resource; the size of a Ready claim and of a bound PVC as JSON, with
// and without managedFields; how the rate scales. Then one claim at a time
// on a warm pool of a quiet cluster (-single claims, each created once
// the one before is Ready), from its create to Ready; and the operator's
// memory with 5,000 MacMachines in its cache, measured in a process of its
// own; the CI rows (-ci, ci.go): jobs queued at once on a runner set's
// warm Macs with the GitHub fake and simulated guests, timed from queued to
// running; and the agent endpoint's memory and goroutines with -watches
// guest agents (10,000) holding their watch (watches.go). With -profile-dir it
// also writes CPU profiles of the API server and of the operator's
// process, and a CI run prints how busy each controller was. Run it with
// `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
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
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func main() {
	// The CI rows' guests run this binary as GitHub's runner.
	if code, played := harness.PlayGuestRole(); played {
		os.Exit(code)
	}
	sizes := flag.String("n", "200,1000,2000", "claims and idle machines (and PVCs and PVs) per side: a comma-separated list of sizes (empty skips the binding rows)")
	runs := flag.Int("runs", 3, "runs per size, the sides in alternating order, each against an API server of its own; the median is the headline")
	single := flag.Int("single", 50, "claims created one at a time on a warm pool of as many idle machines, for the latency a user sees (0 skips it)")
	cacheN := flag.Int("cache-machines", 5000, "MacMachines in the cache for the memory figure (0 skips it)")
	suspended := flag.Int("suspended", 50, "claims made one at a time on a pool of suspended Macs on two fake Apple-silicon hosts (0 skips it)")
	resume := flag.Duration("resume", 3*time.Second, "how long the fake tart takes to restore a suspended VM (-suspended)")
	ciSizes := flag.String("ci", "500:500:500,200:50:100", "CI rows, jobs:warm:maxRunners each: jobs queued at once on a runner set's warm Macs (empty skips them)")
	ciRuns := flag.Int("ci-runs", 3, "runs per CI row; the median is the headline")
	ciRun := flag.String("ci-run", "", "internal: be the process of one CI run of this size")
	watches := flag.Int("watches", 10000, "guest agents holding their watch on the agent endpoint, for its memory and goroutines (0 skips it)")
	watchServerN := flag.Int("watch-server", 0, "internal: be the agent endpoint's process of the watch figure, for this many agents")
	watchAgentsN := flag.Int("watch-agents", 0, "internal: be the agents' process of the watch figure, this many agents")
	watchEndpoint := flag.String("watch-endpoint", "", "internal: the endpoint of -watch-agents")
	watchCA := flag.String("watch-ca", "", "internal: the CA bundle of -watch-agents")
	kcm := flag.String("kube-controller-manager", filepath.Join(cluster.RepoRoot(), "bin", "envtest", "kube-controller-manager"),
		"kube-controller-manager binary (make envtest builds it)")
	flag.IntVar(&benchWorkers, "workers", 16, "claim workers of the operator")
	flag.StringVar(&profileDir, "profile-dir", "", "write CPU profiles of the API server (and of the operator's process) per size, run and side, and per CI run, here, "+
		"where a CI run also profiles its own process and prints how busy each controller's workers were; "+
		"read them with `go tool pprof -top DIR/1000-macvirt-run1-apiserver-*.pprof`")
	memoryNS := flag.String("memory-of", "", "internal: be the operator's process of the memory figure, for the MacMachines of this namespace")
	kubeconfig := flag.String("memory-kubeconfig", "", "internal: the API server of -memory-of")
	operatorKubeconfig := flag.String("operator-kubeconfig", "", "internal: be the operator's process of a macvirt side, against this API server")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	var err error
	switch {
	case *ciRun != "":
		err = ciRunMain(*ciRun)
	case *watchServerN > 0:
		err = watchServer(*watchServerN)
	case *watchAgentsN > 0:
		err = watchAgents(*watchAgentsN, *watchEndpoint, *watchCA)
	case *memoryNS != "":
		err = memoryOf(*kubeconfig, *memoryNS)
	case *operatorKubeconfig != "":
		err = operatorMain(*operatorKubeconfig)
	default:
		var ns []int
		if *sizes != "" {
			if ns, err = parseSizes(*sizes); err == nil && *runs < 1 {
				err = fmt.Errorf("-runs %d: at least one", *runs)
			}
		}
		if err == nil {
			err = run(ns, *runs, *single, *cacheN, *kcm)
		}
		if err == nil && *ciSizes != "" {
			var sizes []ciSize
			if sizes, err = parseCISizes(*ciSizes); err == nil {
				err = benchCIRows(context.Background(), sizes, max(*ciRuns, 1))
			}
		}
		if err == nil && *watches > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d agents holding their watch...\n", *watches)
			err = benchWatches(context.Background(), *watches)
		}
		if err == nil && *suspended > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d claims one at a time on a suspended pool...\n", *suspended)
			var r suspendedResult
			if r, err = benchSuspended(context.Background(), *suspended, *resume); err == nil {
				reportSuspended(r)
			}
		}
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

// runResult is one run of both sides at one size.
type runResult struct {
	n, run       int
	macvirtFirst bool
	ours, theirs result
}

// run measures each size's runs, each against an API server of its own so
// no run inherits another's objects, then the single claims and the memory
// figure against others.
func run(sizes []int, runs, single, cacheN int, kcm string) error {
	if len(sizes) > 0 {
		if err := runBinding(sizes, runs, kcm); err != nil {
			return err
		}
	}
	return runSingleAndMemory(single, cacheN)
}

// runBinding is the binding rows: each size's runs, both sides.
func runBinding(sizes []int, runs int, kcm string) error {
	fmt.Printf("binding N claims over N idle Ready machines (macvirt) and N PVCs over N PVs (the PV binder), %d runs per size, "+
		"one envtest API server per run, %d cores\n\n", runs, runtime.NumCPU())
	var results [][]runResult
	for _, n := range sizes {
		var bySize []runResult
		for k := 1; k <= runs; k++ {
			macvirtFirst := k%2 == 1
			fmt.Fprintf(os.Stderr, "bench: %d claims and %d PVCs, run %d of %d...\n", n, n, k, runs)
			r, err := runOnce(n, k, macvirtFirst, kcm)
			if err != nil {
				return fmt.Errorf("%d claims, run %d: %w", n, k, err)
			}
			printRun(r)
			bySize = append(bySize, r)
		}
		results = append(results, bySize)
	}
	report(results)
	return nil
}

// runSingleAndMemory is one claim at a time, and the memory figure.
func runSingleAndMemory(single, cacheN int) error {
	if single > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d claims one at a time...\n", single)
		r, err := benchSingle(context.Background(), single)
		if err != nil {
			return fmt.Errorf("one claim at a time: %w", err)
		}
		reportSingle(r)
	}
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
	env, cfg, err := cluster.Start(scheme)
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

// runOnce runs both sides at size n against a fresh API server, macvirt
// first or second.
func runOnce(n, k int, macvirtFirst bool, kcm string) (runResult, error) {
	env, _, c, err := startServer()
	if err != nil {
		return runResult{}, err
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	r := runResult{n: n, run: k, macvirtFirst: macvirtFirst}
	ours := func() (err error) {
		if r.ours, err = benchClaims(ctx, env, c, n, fmt.Sprintf("%d-macvirt-run%d", n, k)); err != nil {
			err = fmt.Errorf("macvirt side: %w", err)
		}
		return err
	}
	theirs := func() (err error) {
		if r.theirs, err = benchPVs(ctx, env, c, n, kcm, fmt.Sprintf("%d-pv-run%d", n, k)); err != nil {
			err = fmt.Errorf("PV binder side: %w", err)
		}
		return err
	}
	order := []func() error{ours, theirs}
	if !macvirtFirst {
		order = []func() error{theirs, ours}
	}
	for _, side := range order {
		if err := side(); err != nil {
			return runResult{}, err
		}
	}
	return r, nil
}

// figures are one row's figures: a side of a run to one stage (bound or
// ready), or the median of several. NaN is a figure the row has none of.
type figures struct {
	// srvMs and mutating are the API server's CPU milliseconds and
	// mutating requests per claim over the side's window.
	srvMs, mutating float64
	// p50 and p99 are milliseconds from a create to the stage, perSec the
	// objects at the stage per second from the first create to the last.
	p50, p99, perSec float64
	// binderMs is the binder's process CPU milliseconds per claim over the
	// window, benchMs this process's.
	binderMs, benchMs float64
	// path is the mutating requests on one claim's path to the stage, its
	// create included (the operator's count); opWrites the operator's
	// writes per claim, all of them.
	path, opWrites float64
}

// rowOf is r's figures to the ready stage, or to the bound one; the
// window's figures (server, binder, the operator's writes) belong to the
// ready row alone, as the window runs until the last object is ready.
func rowOf(r result, ready bool) figures {
	nan := math.NaN()
	n := float64(r.n)
	lat, elapsed := r.bound, r.boundElapsed
	f := figures{srvMs: nan, mutating: nan, binderMs: nan, benchMs: nan, path: nan, opWrites: nan}
	if ready {
		lat, elapsed = r.ready, r.readyElapsed
		f.srvMs, f.mutating = 1000*r.server.cpuSeconds/n, r.server.mutating/n
		f.binderMs, f.benchMs = 1000*r.binderCPU/n, 1000*r.benchCPU/n
	}
	f.p50, f.p99 = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	f.perSec = float64(len(lat)) / elapsed.Seconds()
	if op := r.op; op != nil {
		f.path = 1 + op.ToBound
		if ready {
			f.path, f.opWrites = 1+op.ToReady, float64(op.Writes)/n
		}
	}
	return f
}

// median is the median of each figure over rows, NaNs left out.
func median(rows []figures) figures {
	pick := func(get func(figures) float64) float64 {
		var v []float64
		for _, r := range rows {
			if x := get(r); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return math.NaN()
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return figures{
		srvMs: pick(func(f figures) float64 { return f.srvMs }), mutating: pick(func(f figures) float64 { return f.mutating }),
		p50: pick(func(f figures) float64 { return f.p50 }), p99: pick(func(f figures) float64 { return f.p99 }),
		perSec:   pick(func(f figures) float64 { return f.perSec }),
		binderMs: pick(func(f figures) float64 { return f.binderMs }), benchMs: pick(func(f figures) float64 { return f.benchMs }),
		path: pick(func(f figures) float64 { return f.path }), opWrites: pick(func(f figures) float64 { return f.opWrites }),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(latencies []time.Duration, p float64) time.Duration {
	s := slices.Clone(latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// printRun prints one run's figures, compactly.
func printRun(r runResult) {
	order := "macvirt first"
	if !r.macvirtFirst {
		order = "PV binder first"
	}
	bound, ready, pv := rowOf(r.ours, false), rowOf(r.ours, true), rowOf(r.theirs, true)
	fmt.Printf("N=%d run %d (%s):\n", r.n, r.run, order)
	fmt.Printf("  macvirt:   server %.2f ms/cl, %.2f mut/cl; claimRef p50/p99 %.0f/%.0f ms, %.1f/s; Ready p50/p99 %.0f/%.0f ms, %.1f/s; "+
		"operator %.2f ms/cl, %s op w/cl, %s req to claimRef, %s to Ready; bench %.2f ms/cl\n",
		ready.srvMs, ready.mutating, bound.p50, bound.p99, bound.perSec, ready.p50, ready.p99, ready.perSec,
		ready.binderMs, num(ready.opWrites, 2), num(bound.path, 2), num(ready.path, 2), ready.benchMs)
	fmt.Printf("  PV binder: server %.2f ms/cl, %.2f mut/cl; Bound p50/p99 %.0f/%.0f ms, %.1f/s; "+
		"kube-controller-manager %.2f ms/cl; bench %.2f ms/cl\n",
		pv.srvMs, pv.mutating, pv.p50, pv.p99, pv.perSec, pv.binderMs, pv.benchMs)
}

// num formats a figure, "-" for none.
func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func report(results [][]runResult) {
	if len(results) == 0 {
		return
	}
	runs := len(results[0])
	fmt.Printf("\nmedian of %d runs per figure:\n\n", runs)
	fmt.Printf("%6s  %-28s %9s %7s | %7s %7s %8s | %12s %8s %7s\n", "N", "row (latency to)", "srv ms/cl", "mut/cl",
		"p50 ms", "p99 ms", "binds/s", "binder ms/cl", "req/path", "op w/cl")
	row := func(n int, name string, f figures) {
		fmt.Printf("%6d  %-28s %9s %7s | %7s %7s %8s | %12s %8s %7s\n", n, name, num(f.srvMs, 2), num(f.mutating, 2),
			num(f.p50, 0), num(f.p99, 0), num(f.perSec, 1), num(f.binderMs, 2), num(f.path, 2), num(f.opWrites, 2))
	}
	meds := make([][3]figures, len(results))
	for i, bySize := range results {
		var bound, ready, pv []figures
		for _, r := range bySize {
			bound, ready, pv = append(bound, rowOf(r.ours, false)), append(ready, rowOf(r.ours, true)), append(pv, rowOf(r.theirs, true))
		}
		meds[i] = [3]figures{median(bound), median(ready), median(pv)}
		n := bySize[0].n
		row(n, "macvirt bind (claimRef)", meds[i][0])
		row(n, "macvirt bind+reach (Ready)", meds[i][1])
		row(n, "PV binder (Bound)", meds[i][2])
	}
	fmt.Printf("\n(srv ms/cl, mut/cl: the API server's CPU (its process_cpu_seconds_total) and mutating requests (apiserver_request_total)\n"+
		" per claim over the side's window: from its first create, the API server idle before it, to %s after its last\n"+
		" object was ready, the creates included; macvirt's are in its Ready row, the window being one. p50, p99, binds/s: from each\n"+
		" create call to the first watch event showing the row's stage: for macvirt bind, the machine's spec.claimRef naming the\n"+
		" claim; for macvirt bind+reach, the claim's Ready condition True (bound, its machine Ready at its address and its\n"+
		" NetworkPolicy letting the claim's namespace in); for the PV binder, the PVC Bound. binder ms/cl: the binder's process CPU\n"+
		" per claim over the window, user and system, from /proc/<pid>/stat: the operator's process (claim and exposure\n"+
		" controllers) or kube-controller-manager (the PV binder alone). req/path: mutating requests on one claim's path to the\n"+
		" row's stage, its create included (the operator's count of its own writes, those that failed included). op w/cl: the\n"+
		" operator's writes per claim over the window, all of them. Each figure is the median of its own over the runs.)\n\n", settle)
	for i, bySize := range results {
		n := bySize[0].n
		bound, ready, pv := meds[i][0], meds[i][1], meds[i][2]
		cpu := ready.srvMs / pv.srvMs
		speed, speedBound := ready.perSec/pv.perSec, bound.perSec/pv.perSec
		p99 := ready.p99 / pv.p99
		fmt.Printf("N=%d: API server CPU per reachable claim %.2fx the PV binder's per bound volume%s; binds/s to Ready %.2fx the PV binder's%s, "+
			"to claimRef %.2fx%s; p99 to Ready %.2fx the PV binder's p99 to Bound%s; mutating requests on a claim's path to Ready %s, "+
			"the create included%s; to claimRef %s\n",
			n, cpu, target(n, cpu, 1, "<="), speed, target(n, speed, 2, ">="), speedBound, target(n, speedBound, 2, ">="),
			p99, target(n, p99, 0.5, "<="), num(ready.path, 2), pathTarget(n, ready.path), num(bound.path, 2))
	}
	if !slices.ContainsFunc(results, func(r []runResult) bool { return r[0].n == 1000 }) {
		fmt.Printf("(the targets are for N=1000, which was not run)\n")
	}
	fmt.Printf("\nthe API server's mutating requests per claim, by verb and resource, mean of the runs (the creates included):\n")
	for _, bySize := range results {
		n := bySize[0].n
		fmt.Printf("N=%d macvirt:   %s\n", n, breakdown(sumLoads(bySize, true).byResource, n*len(bySize)))
		fmt.Printf("N=%d PV binder: %s\n", n, breakdown(sumLoads(bySize, false).byResource, n*len(bySize)))
	}
	fmt.Printf("\nand its other requests per claim (reads; the bench's own watches and the metrics it reads included):\n")
	for _, bySize := range results {
		n, k := bySize[0].n, len(bySize)
		ours, theirs := sumLoads(bySize, true).reads, sumLoads(bySize, false).reads
		fmt.Printf("N=%d macvirt:   %.2f in all; %s\n", n, total(ours)/float64(n*k), breakdown(ours, n*k))
		fmt.Printf("N=%d PV binder: %.2f in all; %s\n", n, total(theirs)/float64(n*k), breakdown(theirs, n*k))
	}
	fmt.Printf("\nbytes per claim, as JSON, at the end of run 1 (managedFields included; without them):\n")
	for _, bySize := range results {
		r := bySize[0]
		fmt.Printf("N=%d: a Ready MacClaim %d bytes (%d without managedFields); a bound PVC %d bytes (%d)\n", r.n,
			r.ours.bytes.full, r.ours.bytes.withoutManagedFields, r.theirs.bytes.full, r.theirs.bytes.withoutManagedFields)
	}
	if len(results) > 1 {
		first, last := meds[0], meds[len(meds)-1]
		fmt.Printf("\nscale, N=%d against N=%d (medians): macvirt binds/s to Ready x%.2f, PV binder binds/s x%.2f (1.00: the rate holds as the work grows)\n",
			results[len(results)-1][0].n, results[0][0].n, last[1].perSec/first[1].perSec, last[2].perSec/first[2].perSec)
	}
}

// sumLoads adds up the server loads of the runs' macvirt sides, or of
// their PV binder sides.
func sumLoads(runs []runResult, ours bool) serverLoad {
	sum := serverLoad{byResource: map[string]float64{}, reads: map[string]float64{}}
	for _, r := range runs {
		l := r.theirs.server
		if ours {
			l = r.ours.server
		}
		sum.cpuSeconds += l.cpuSeconds
		sum.mutating += l.mutating
		for k, v := range l.byResource {
			sum.byResource[k] += v
		}
		for k, v := range l.reads {
			sum.reads[k] += v
		}
	}
	return sum
}

// pathTarget compares the requests on a claim's path to Ready with the
// target: 3 counting the create, 4 with the machine's NetworkPolicy update.
func pathTarget(n int, v float64) string {
	if n != 1000 || math.IsNaN(v) {
		return ""
	}
	return fmt.Sprintf(" (target 3: %s; 4 with the NetworkPolicy's update: %s)", verdict(v <= 3), verdict(v <= 4))
}

// breakdown lists the requests per claim, largest first, leaving out what
// is below 0.05 per claim (leases, the bench's own watch relists).
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

// target says how a figure at size n compares with the target,
// which is for N=1000; nothing at other sizes.
func target(n int, v, t float64, cmp string) string {
	if n != 1000 {
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
