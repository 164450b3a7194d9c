package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// The CI row: what a CI user feels, the time from a job queued to its
// runner running it, with the project's GitHub fake and simulated guests
// (the harness's world: the API server, KubeVirt's control plane, the
// simulated node and guests, the operator with its agent endpoint and
// runner sets). A runner set with a warm pool waits until its Macs are
// Ready and the API server is idle; then every job is queued at once.

// ciSize is one CI row: jobs queued at once on warm Macs, maxRunners.
type ciSize struct{ jobs, warm, maxRunners int }

func (s ciSize) String() string {
	return fmt.Sprintf("%d jobs on %d warm Macs, maxRunners %d", s.jobs, s.warm, s.maxRunners)
}

// parseCISizes reads -ci: "jobs:warm:maxRunners,…".
func parseCISizes(v string) ([]ciSize, error) {
	var out []ciSize
	for _, f := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(f), ":")
		if len(parts) != 3 {
			return nil, fmt.Errorf("-ci %q: each size is jobs:warm:maxRunners, as in -ci 500:500:500,200:50:100", v)
		}
		var n [3]int
		for i, p := range parts {
			x, err := strconv.Atoi(p)
			if err != nil || x < 0 || (i != 1 && x < 1) {
				return nil, fmt.Errorf("-ci %q: %q is not a count", v, p)
			}
			n[i] = x
		}
		if n[1] > n[2] || n[2] > 500 {
			return nil, fmt.Errorf("-ci %q: warm Macs may not exceed maxRunners, nor maxRunners 500", v)
		}
		out = append(out, ciSize{jobs: n[0], warm: n[1], maxRunners: n[2]})
	}
	return out, nil
}

// ciResult is one run of one size.
type ciResult struct {
	size ciSize
	// warmUp is how long the warm pool took to be Ready.
	warmUp time.Duration
	// waits are each job's queued to running (its runner took it).
	waits []time.Duration
	// window is from the first job queued to the last completed.
	window time.Duration
	load   serverLoad
	// cpu is the bench process's CPU over the window: the operator, and
	// with it the simulated node, guests and GitHub; heap its heap in use
	// after.
	cpu  float64
	heap uint64
	// p50, p99 and most are the waits' figures: of waits for a run, each
	// the median of the runs' for a median.
	p50, p99, most time.Duration
}

// figures sets the waits' figures from the run's waits.
func (r *ciResult) figures() {
	r.p50, r.p99 = percentile(r.waits, 0.50), percentile(r.waits, 0.99)
	r.most = slices.Max(append([]time.Duration{0}, r.waits...))
}

// ciWire is a ciResult as a run's process hands it to the bench.
type ciWire struct {
	WarmUp, Window time.Duration
	Waits          []time.Duration
	APICPU         float64
	Mutating       float64
	ByResource     map[string]float64
	CPU            float64
	Heap           uint64
}

// ciRunMain is the process of one CI run (-ci-run): it runs the size in a
// world of its own (a world's controllers are named once per process) and
// prints the result as JSON.
func ciRunMain(v string) error {
	sizes, err := parseCISizes(v)
	if err != nil || len(sizes) != 1 {
		return fmt.Errorf("-ci-run %q: one size: %w", v, err)
	}
	r, err := benchCI(context.Background(), sizes[0])
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(ciWire{WarmUp: r.warmUp, Window: r.window, Waits: r.waits, APICPU: r.load.cpuSeconds,
		Mutating: r.load.mutating, ByResource: r.load.byResource, CPU: r.cpu, Heap: r.heap})
}

// benchCIRun runs one size once in a process of its own.
func benchCIRun(ctx context.Context, size ciSize) (ciResult, error) {
	self, err := os.Executable()
	if err != nil {
		return ciResult{}, err
	}
	args := []string{"-ci-run", fmt.Sprintf("%d:%d:%d", size.jobs, size.warm, size.maxRunners)}
	if profileDir != "" {
		args = append(args, "-profile-dir", profileDir)
	}
	cmd := exec.CommandContext(ctx, self, args...) //nolint:gosec // this binary.
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return ciResult{}, fmt.Errorf("the run's process: %w", err)
	}
	var wire ciWire
	if err := json.Unmarshal(out, &wire); err != nil {
		return ciResult{}, fmt.Errorf("the run's process printed %q: %w", out, err)
	}
	r := ciResult{size: size, warmUp: wire.WarmUp, waits: wire.Waits, window: wire.Window, cpu: wire.CPU, heap: wire.Heap,
		load: serverLoad{cpuSeconds: wire.APICPU, mutating: wire.Mutating, byResource: wire.ByResource}}
	r.figures()
	return r, nil
}

const benchGitHubToken = "github_pat_macvirt_bench" //nolint:gosec // the fake GitHub's, not a credential.

// benchCI runs one size once, in a world of its own.
func benchCI(ctx context.Context, size ciSize) (ciResult, error) {
	r := ciResult{size: size}
	w, err := harness.Start(ctx, harness.Options{CIClass: true, Samples: &harness.SampleOptions{},
		System: &harness.SystemOptions{Speed: 4,
			RunnerSets: operator.RunnerSetOptions{Client: github.Options{RetryMax: 2, RetryWaitMax: time.Second, Timeout: 30 * time.Second},
				Backoff: 500 * time.Millisecond, MaxBackoff: 5 * time.Second}},
		GitHub: &fakegithub.Options{Tokens: []string{benchGitHubToken}, PollWait: 2 * time.Second}})
	if err != nil {
		return r, err
	}
	defer func() { _ = w.Stop() }()
	c := w.Admin
	// The samples' golden image is the CI class's; their pool's Macs would
	// only add load.
	var pools macvirtv1alpha1.MacPoolList
	if err := c.List(ctx, &pools); err != nil {
		return r, err
	}
	for i := range pools.Items {
		if err := c.Delete(ctx, &pools.Items[i]); client.IgnoreNotFound(err) != nil {
			return r, err
		}
	}
	// The CI class with the default heartbeatTimeout (a heartbeat every
	// 30 s): tasks reach the Macs through their watch, not a heartbeat.
	class := &macvirtv1alpha1.MacClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: harness.CIClass}, class); err != nil {
		return r, err
	}
	bench := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "bench-ci"}, Spec: *class.Spec.DeepCopy()}
	bench.Spec.Lifecycle.HeartbeatTimeout = nil
	const ns = "bench-ci"
	for _, o := range []client.Object{bench, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"}, StringData: map[string]string{"token": benchGitHubToken}}} {
		if err := c.Create(ctx, o); err != nil {
			return r, err
		}
	}
	set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mac"},
		Spec: macvirtv1alpha1.MacRunnerSetSpec{
			GitHub:    macvirtv1alpha1.GitHubRunnerTarget{URL: w.GitHub.URL() + "/acme", CredentialsSecretName: "github"},
			ClassName: bench.Name, MaxRunners: int32(size.maxRunners), MinIdle: int32(size.warm), //nolint:gosec // at most 500.
			JobTimeout: &metav1.Duration{Duration: 30 * time.Minute}, RegistrationTimeout: &metav1.Duration{Duration: 20 * time.Minute}}}
	if err := c.Create(ctx, set); err != nil {
		return r, err
	}
	start := time.Now()
	pool := "runners-" + ns + "-" + set.Name
	said, state := time.Now(), ""
	var pace int32
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &macvirtv1alpha1.MacPool{}
		if err := c.Get(ctx, client.ObjectKey{Name: pool}, p); err != nil {
			state = "no warm pool yet: " + err.Error()
			return false, client.IgnoreNotFound(err)
		}
		if p.Spec.MaxProvisioning < 100 {
			// Only the warm-up is hurried: the pool boots 100 Macs at
			// once rather than its own pace, which is back for the jobs.
			pace, p.Spec.MaxProvisioning = p.Spec.MaxProvisioning, 100
			if err := c.Update(ctx, p); err != nil {
				return false, client.IgnoreNotFound(ignoreConflict(err))
			}
		}
		got := &macvirtv1alpha1.MacRunnerSet{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(set), got); err != nil {
			return false, err
		}
		listening := false
		state = fmt.Sprintf("pool: %d idle of %d machines; set:", p.Status.Idle, p.Status.Machines)
		for _, cond := range got.Status.Conditions {
			listening = listening || (cond.Type == macvirtv1alpha1.ConditionReady && cond.Reason == macvirtv1alpha1.ReasonListening)
			state += fmt.Sprintf(" %s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		if time.Since(said) > time.Minute {
			fmt.Fprintf(os.Stderr, "bench: warming %s: %s\n", time.Since(start).Round(time.Second), state)
			said = time.Now()
		}
		return listening && int(p.Status.Idle) >= size.warm, nil
	}); err != nil {
		return r, fmt.Errorf("the warm pool of %d Macs: %w (%s)", size.warm, err, state)
	}
	r.warmUp = time.Since(start)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &macvirtv1alpha1.MacPool{}
		if err := c.Get(ctx, client.ObjectKey{Name: pool}, p); err != nil {
			return err
		}
		p.Spec.MaxProvisioning = pace
		return c.Update(ctx, p)
	}); err != nil {
		return r, err
	}
	if err := waitIdle(ctx, w.Config, time.Second, 2*time.Minute); err != nil {
		return r, err
	}
	before, err := sampleServer(ctx, w.Config)
	if err != nil {
		return r, err
	}
	label := fmt.Sprintf("ci-%d-%d-%d-%d", size.jobs, size.warm, size.maxRunners, time.Now().Unix())
	stopProfiles, err := startProfiles(ctx, w.Config, label)
	if err != nil {
		return r, err
	}
	stopRunProfile, err := profileRun(label)
	if err != nil {
		return r, err
	}
	cpu0 := processCPU()
	first := time.Now()
	ids := make([]string, size.jobs)
	var wg sync.WaitGroup
	for i := range size.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = w.GitHub.QueueJob(fakegithub.Job{Owner: "acme", Repo: "ios-app", Labels: []string{"mac"},
				DisplayName: fmt.Sprintf("build-%d", i), Duration: 2 * time.Second})
		}()
	}
	wg.Wait()
	var done []fakegithub.JobView
	said = time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Minute, true, func(context.Context) (bool, error) {
		done = done[:0]
		states := map[fakegithub.JobState]int{}
		for _, id := range ids {
			j, ok := w.GitHub.Job(id)
			states[j.State]++
			if ok && j.State == fakegithub.JobCompleted {
				done = append(done, j)
			}
		}
		if time.Since(said) > 30*time.Second {
			got := &macvirtv1alpha1.MacRunnerSet{}
			_ = c.Get(ctx, client.ObjectKeyFromObject(set), got)
			var claims macvirtv1alpha1.MacClaimList
			_ = c.List(ctx, &claims, client.InNamespace(ns))
			phases := map[string]int{}
			for _, cl := range claims.Items {
				why := string(cl.Status.Phase)
				for _, b := range cl.Status.Bootstrap {
					why += "/" + b.Name + "=" + string(b.State) + ":" + b.Message
				}
				phases[why]++
			}
			fmt.Fprintf(os.Stderr, "bench: jobs %v; set %d pending, %d idle, %d running; claims %v\n", states, got.Status.Pending, got.Status.Idle,
				got.Status.Running, phases)
			said = time.Now()
		}
		return len(done) == len(ids), nil
	}); err != nil {
		return r, fmt.Errorf("%d jobs completed of %d: %w", len(done), size.jobs, err)
	}
	last := first
	for _, j := range done {
		r.waits = append(r.waits, j.RunnerAssignTime.Sub(j.QueueTime))
		if j.FinishTime.After(last) {
			last = j.FinishTime
		}
	}
	r.window = last.Sub(first)
	r.cpu = processCPU() - cpu0
	stopRunProfile(time.Since(first))
	stopProfiles()
	after, err := sampleServer(ctx, w.Config)
	if err != nil {
		return r, err
	}
	r.load = after.minus(before)
	r.heap = heapInUse()
	return r, nil
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// benchCIRows runs each size runs times and prints each run and the
// medians.
func benchCIRows(ctx context.Context, sizes []ciSize, runs int) error {
	fmt.Printf("\nCI: jobs queued at once on a runner set's warm Macs (the project's GitHub fake, simulated guests, a class with the default "+
		"heartbeatTimeout), %d runs per size, %d cores; a job's wait is from queued to its runner running it\n", runs, runtime.NumCPU())
	for _, size := range sizes {
		var rows []ciResult
		for k := 1; k <= runs; k++ {
			fmt.Fprintf(os.Stderr, "bench: CI, %s, run %d of %d...\n", size, k, runs)
			r, err := benchCIRun(ctx, size)
			if err != nil {
				return fmt.Errorf("CI, %s, run %d: %w", size, k, err)
			}
			printCI(fmt.Sprintf("  run %d", k), r)
			rows = append(rows, r)
		}
		printCI("  median", medianCI(rows))
	}
	return nil
}

func printCI(label string, r ciResult) {
	n := float64(len(r.waits))
	fmt.Printf("%s, %s: queued to running p50 %.0f ms, p99 %.0f ms, max %.0f ms; %.1f jobs/s; API server CPU %.1f ms and %.1f mutating "+
		"requests per job; the operator's process (with the simulated node, guests and GitHub) %.1f ms CPU per job, heap %.0f MiB; warm pool Ready in %s\n",
		label, r.size, ms(r.p50), ms(r.p99), ms(r.most),
		n/r.window.Seconds(), 1000*r.load.cpuSeconds/n, r.load.mutating/n, 1000*r.cpu/n, mib(r.heap), r.warmUp.Round(time.Second))
	if len(r.load.byResource) == 0 {
		return
	}
	type req struct {
		what string
		n    float64
	}
	var reqs []req
	for k, v := range r.load.byResource {
		reqs = append(reqs, req{k, v / n})
	}
	slices.SortFunc(reqs, func(a, b req) int { return int(1000 * (b.n - a.n)) })
	line := "    mutating requests per job, the warm pool's refill included:"
	for i, q := range reqs {
		if i == 12 {
			break
		}
		line += fmt.Sprintf(" %s %.2f;", q.what, q.n)
	}
	fmt.Println(strings.TrimSuffix(line, ";"))
}

// medianCI is the run whose p50 wait is the median (its requests by
// resource are printed), with every other figure, the waits' p99 and
// most included, the median of the runs'.
func medianCI(rows []ciResult) ciResult {
	mid := func(f func(ciResult) float64) float64 {
		v := make([]float64, 0, len(rows))
		for _, r := range rows {
			v = append(v, f(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	byP50 := slices.Clone(rows)
	slices.SortFunc(byP50, func(a, b ciResult) int {
		return int(percentile(a.waits, 0.5) - percentile(b.waits, 0.5))
	})
	m := byP50[len(byP50)/2]
	m.p99 = time.Duration(mid(func(r ciResult) float64 { return float64(r.p99) }))
	m.most = time.Duration(mid(func(r ciResult) float64 { return float64(r.most) }))
	m.window = time.Duration(mid(func(r ciResult) float64 { return float64(r.window) }))
	m.load.cpuSeconds = mid(func(r ciResult) float64 { return r.load.cpuSeconds })
	m.load.mutating = mid(func(r ciResult) float64 { return r.load.mutating })
	m.cpu = mid(func(r ciResult) float64 { return r.cpu })
	m.heap = uint64(mid(func(r ciResult) float64 { return float64(r.heap) }))
	m.warmUp = time.Duration(mid(func(r ciResult) float64 { return float64(r.warmUp) }))
	return m
}
