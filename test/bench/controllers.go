package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// controllerTimes is, per controller, what its workers did: the seconds
// spent reconciling, the reconciles, and the seconds requests waited in
// its queue before a worker took them (controller-runtime's own metrics).
type controllerTimes map[string]struct {
	busy, waited float64
	reconciles   uint64
	taken        uint64
	workers      float64
}

// sampleControllers reads the controllers of this process from
// controller-runtime's registry.
func sampleControllers() (controllerTimes, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	out := controllerTimes{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := label(m, "controller")
			if name == "" {
				name = label(m, "name")
			}
			if name == "" {
				continue
			}
			t := out[name]
			switch f.GetName() {
			case "controller_runtime_reconcile_time_seconds":
				t.busy += m.GetHistogram().GetSampleSum()
				t.reconciles += m.GetHistogram().GetSampleCount()
			case "workqueue_queue_duration_seconds":
				t.waited += m.GetHistogram().GetSampleSum()
				t.taken += m.GetHistogram().GetSampleCount()
			case "controller_runtime_max_concurrent_reconciles":
				t.workers = m.GetGauge().GetValue()
			default:
				continue
			}
			out[name] = t
		}
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// printControllers says, for the controllers that worked in a window, how
// busy their workers were and how long a request waited for one: a
// controller whose workers were busy the whole window is where a burst
// queues.
func printControllers(before, after controllerTimes, window time.Duration) {
	type row struct {
		name                  string
		busy, waited, workers float64
		reconciles, taken     uint64
	}
	var rows []row
	for name, a := range after {
		b := before[name]
		r := row{name: name, busy: a.busy - b.busy, waited: a.waited - b.waited, workers: a.workers,
			reconciles: a.reconciles - b.reconciles, taken: a.taken - b.taken}
		if r.reconciles == 0 && r.taken == 0 {
			continue
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].busy > rows[j].busy })
	for _, r := range rows {
		wait := 0.0
		if r.taken > 0 {
			wait = r.waited / float64(r.taken)
		}
		use := 0.0
		if r.workers > 0 && window > 0 {
			use = r.busy / (r.workers * window.Seconds())
		}
		fmt.Fprintf(os.Stderr, "bench: controller %-28s %6d reconciles, busy %7.1f s (%3.0f%% of %2.0f workers over %.0f s), waited in queue %.2f s each\n",
			r.name, r.reconciles, r.busy, 100*use, r.workers, window.Seconds(), wait)
	}
}

// profileRun profiles this process (the operator, the simulated node and
// guests, the GitHub fake) into <label>-run.pprof under profileDir while
// a CI side is measured, and prints, when stopped, how busy the whole
// machine was and its controllers' busy times. Nothing when profileDir is empty.
func profileRun(label string) (stop func(window time.Duration), err error) {
	if profileDir == "" {
		return func(time.Duration) {}, nil
	}
	before, err := sampleControllers()
	if err != nil {
		return nil, err
	}
	busy0, all0, cpus, err := machineCPU()
	if err != nil {
		return nil, err
	}
	f, err := startOwnProfile(filepath.Join(profileDir, label+"-run.pprof"))
	if err != nil {
		return nil, err
	}
	return func(window time.Duration) {
		pprof.StopCPUProfile()
		_ = f.Close()
		after, err := sampleControllers()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: reading the controllers' metrics:", err)
			return
		}
		if busy, all, _, err := machineCPU(); err == nil && all > all0 {
			fmt.Fprintf(os.Stderr, "bench: the machine was %.0f%% busy over the run (%.1f of %d CPUs)\n",
				100*(busy-busy0)/(all-all0), float64(cpus)*(busy-busy0)/(all-all0), cpus)
		}
		printControllers(before, after, window)
	}, nil
}
