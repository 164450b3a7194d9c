// Package fakegitlabrunner plays GitLab Runner's side of a fleeting plugin with
// the instance executor, for tests and the sandbox: it starts the plugin
// binary and drives it with GitLab's own fleeting provisioner (the library
// gitlab-runner's autoscaler builds on), as a runner configured with
// capacity_per_instance = 1 and max_use_count = 1 does: each job gets an
// instance of its own that no job used before, runs over SSH with GitLab's
// own connector, and the instance is deleted when the job ends. GitLab's
// autoscaler itself (taskscaler) is not published where this project's
// modules come from, so its scheduling is played here, in the small.
package fakegitlabrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"gitlab.com/gitlab-org/fleeting/fleeting"
	"gitlab.com/gitlab-org/fleeting/fleeting/connector"
	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
)

// Options configure a burst of jobs.
type Options struct {
	// Plugin is the plugin binary; PluginConfig its plugin_config.
	Plugin       string
	PluginConfig any
	// Connector is the runner's connector_config.
	Connector provider.ConnectorConfig
	// MaxInstances is the runner's max_instances.
	MaxInstances int
	// Jobs is how many jobs to run, all queued at once.
	Jobs int
	// Dial, when set, is how the runner's host reaches an address (a pod
	// in a namespace of the simulated cluster); nil dials directly.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// UseExternalAddr is connector_config use_external_addr.
	UseExternalAddr bool
	// JobTimeout bounds each job from its request to its end.
	JobTimeout time.Duration
	// Log gets the runner's log lines (the plugin's included); nil: none.
	Log io.Writer
}

// Job is what one job saw.
type Job struct {
	N        int
	Instance string
	// Address is where the runner connected; User who it logged in as.
	Address, User string
	// Output is what the job's commands printed, in order.
	Output string
	// Waited is how long the job waited for its Mac; Ran how long it ran.
	Waited, Ran time.Duration
	Err         error
}

// Report is the burst's outcome.
type Report struct {
	Jobs []Job
	// MostInstances is the most instances the provisioner knew of at once
	// (creating, running or deleting).
	MostInstances int
}

// Step is one command of a job, with its input.
type Step struct {
	Command string
	Stdin   string
	// WantExit is the exit status the step must end with.
	WantExit int
}

// JobSteps are the commands each job runs: it proves the Mac is fresh (no
// file an earlier job left), leaves a file, and reads it back.
func JobSteps(n int) []Step {
	return []Step{
		{Command: "cat job.txt", WantExit: 1},
		{Command: "cat > job.txt", Stdin: fmt.Sprintf("job %d\n", n)},
		{Command: "cat job.txt"},
		{Command: "hostname"},
	}
}

// Run starts the plugin, runs the burst, shuts the provisioner down (which
// deletes what is left) and stops the plugin.
func Run(ctx context.Context, opts Options) (Report, error) {
	logOut := opts.Log
	if logOut == nil {
		logOut = io.Discard
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "runner", Output: &lockedWriter{w: logOut}, Level: hclog.Info})
	config, err := json.Marshal(opts.PluginConfig)
	if err != nil {
		return Report{}, err
	}
	plugin, err := fleeting.RunPlugin(opts.Plugin, config, fleeting.WithPluginLogger(log.Named("plugin")))
	if err != nil {
		return Report{}, fmt.Errorf("starting the plugin: %w", err)
	}
	defer plugin.Kill()

	var mu sync.Mutex
	report := Report{}
	used := map[string]bool{}
	changed := make(chan struct{}, 1)
	prov, err := fleeting.Init(ctx, log, plugin.InstanceGroup(),
		fleeting.WithMaxSize(opts.MaxInstances),
		fleeting.WithInstanceGroupSettings(provider.Settings{ConnectorConfig: opts.Connector}),
		fleeting.WithUpdateInterval(time.Second),
		fleeting.WithUpdateIntervalWhenExpecting(200*time.Millisecond),
		fleeting.WithDeletionRetryInterval(10*time.Second),
		fleeting.WithSubscriber(func([]fleeting.Instance) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		return Report{}, fmt.Errorf("initialising the instance group: %w", err)
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		prov.Shutdown(sctx)
	}
	defer shutdown()

	// The most instances at once, sampled on every update.
	sampleDone := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			n := len(prov.Instances())
			mu.Lock()
			report.MostInstances = max(report.MostInstances, n)
			mu.Unlock()
			select {
			case <-sampleDone:
				return
			case <-tick.C:
			case <-changed:
			}
		}
	})

	// take hands a job a running instance no job has used.
	take := func(jctx context.Context) (fleeting.Instance, error) {
		for {
			mu.Lock()
			var free []fleeting.Instance
			for _, inst := range prov.Instances() {
				if !used[inst.ID()] && inst.State() == provider.StateRunning {
					free = append(free, inst)
				}
			}
			if len(free) > 0 {
				sort.Slice(free, func(i, j int) bool { return free[i].ID() < free[j].ID() })
				used[free[0].ID()] = true
				mu.Unlock()
				return free[0], nil
			}
			mu.Unlock()
			select {
			case <-jctx.Done():
				return nil, fmt.Errorf("no instance came: %w", jctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	jobs := make([]Job, opts.Jobs)
	var wg sync.WaitGroup
	prov.Request(opts.Jobs)
	for i := range opts.Jobs {
		wg.Go(func() {
			jobs[i] = runJob(ctx, opts, i+1, take)
		})
	}
	wg.Wait()
	close(sampleDone)
	sampler.Wait()
	report.Jobs = jobs
	var errs []error
	for _, j := range jobs {
		if j.Err != nil {
			errs = append(errs, fmt.Errorf("job %d on %s: %w", j.N, j.Instance, j.Err))
		}
	}
	return report, errors.Join(errs...)
}

// runJob waits for an instance, connects, runs the steps and deletes the
// instance (max_use_count = 1).
func runJob(ctx context.Context, opts Options, n int, take func(context.Context) (fleeting.Instance, error)) Job {
	job := Job{N: n}
	timeout := opts.JobTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	jctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	inst, err := take(jctx)
	if err != nil {
		job.Err = err
		return job
	}
	defer inst.Delete()
	job.Instance, job.Waited = inst.ID(), time.Since(start)
	info, err := inst.ConnectInfo(jctx)
	if err != nil {
		job.Err = fmt.Errorf("connect info: %w", err)
		return job
	}
	job.User, job.Address = info.Username, info.InternalAddr
	if opts.UseExternalAddr {
		job.Address = info.ExternalAddr
	}
	ran := time.Now()
	cl, err := connector.Dial(jctx, info, connector.DialOptions{DialFn: opts.Dial, UseExternalAddr: opts.UseExternalAddr})
	if err != nil {
		job.Err = fmt.Errorf("connecting: %w", err)
		return job
	}
	defer func() { _ = cl.Close() }()
	var out strings.Builder
	for _, s := range JobSteps(n) {
		var stdout, stderr bytes.Buffer
		err := cl.Run(jctx, connector.RunOptions{Command: s.Command, Stdin: strings.NewReader(s.Stdin), Stdout: &stdout, Stderr: &stderr})
		code := 0
		if exit := (*connector.ExitError)(nil); errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			job.Err = fmt.Errorf("%s: %w", s.Command, err)
			break
		}
		fmt.Fprintf(&out, "$ %s\n%s%s", s.Command, stdout.String(), stderr.String())
		if code != s.WantExit {
			job.Err = fmt.Errorf("%s: exit %d, want %d: %s%s", s.Command, code, s.WantExit, stdout.String(), stderr.String())
			break
		}
	}
	job.Output, job.Ran = out.String(), time.Since(ran)
	return job
}

// lockedWriter serialises the log's writers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
