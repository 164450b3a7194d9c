/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"math/rand/v2"
	"sync"
	"time"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Realistic timings, as a real cluster shows them. The import interval is
// CDI's: its DataVolume controllers read an import's progress again every
// 2 s while the importer runs (reconcileProgressUpdate in
// pkg/controller/datavolume/controller-base.go, reconcileTargetPVC in
// pkg/controller/populators/import-populator.go). The others are what a
// macOS guest on Apple hardware typically takes; virt-controller's own
// crash-loop backoff runs on its own clock.
const (
	RealisticImportSteps    = 90 // 3 minutes of 2 s progress reads
	RealisticStepInterval   = 2 * time.Second
	RealisticStartDelay     = 15 * time.Second // launcher pod scheduled, started, domain defined
	RealisticShutdownDelay  = 30 * time.Second // macOS ACPI power-off
	RealisticGuestBootDelay = 60 * time.Second // OpenCore to the agent's first heartbeat
	// RealisticSnapshotClone is a snapshot clone: the snapshot, a claim
	// restored from it, the prep pod and the rebind.
	RealisticSnapshotClone = 30 * time.Second
	// RealisticCSIClone is a CSI clone: the clone, the prep pod and the
	// rebind.
	RealisticCSIClone = 20 * time.Second
	// RealisticCopyPerGiB is a host-assisted copy moving some 500 MiB/s.
	RealisticCopyPerGiB = 2 * time.Second
	// RealisticSnapshotDelay is a CSI driver cutting a snapshot.
	RealisticSnapshotDelay = 5 * time.Second
	// RealisticJitter spreads every timed step by up to a fifth either way.
	RealisticJitter = 0.2
)

// Realistic returns Options with a real cluster's timings and jitter, the
// jitter drawn from a source seeded with seed so that a run can be repeated.
// Scale it with Scaled; set Guests and NodeName as needed.
func Realistic(seed int64) Options {
	return Options{
		ImportSteps:    RealisticImportSteps,
		StepInterval:   RealisticStepInterval,
		StartDelay:     RealisticStartDelay,
		ShutdownDelay:  RealisticShutdownDelay,
		GuestBootDelay: RealisticGuestBootDelay,
		CloneDurations: map[cdiv1.CDICloneStrategy]time.Duration{
			cdiv1.CloneStrategySnapshot:     RealisticSnapshotClone,
			cdiv1.CloneStrategyCsiClone:     RealisticCSIClone,
			cdiv1.CloneStrategyHostAssisted: RealisticCopyPerGiB,
		},
		SnapshotDelay: RealisticSnapshotDelay,
		Jitter:        RealisticJitter,
		Seed:          seed,
	}
}

// Scaled returns o with every duration divided by speed: 2 runs twice as
// fast. A speed of zero or less leaves o as it is.
func (o Options) Scaled(speed float64) Options {
	if speed <= 0 {
		return o
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / speed) }
	o.StepInterval = scale(o.StepInterval)
	o.StartDelay = scale(o.StartDelay)
	o.ShutdownDelay = scale(o.ShutdownDelay)
	o.GuestBootDelay = scale(o.GuestBootDelay)
	o.SnapshotDelay = scale(o.SnapshotDelay)
	if o.CloneDurations != nil {
		durations := make(map[cdiv1.CDICloneStrategy]time.Duration, len(o.CloneDurations))
		for k, d := range o.CloneDurations {
			durations[k] = scale(d)
		}
		o.CloneDurations = durations
	}
	return o
}

// jitter draws the random spread of timed steps. A nil *jitter draws
// nothing, which keeps the tests' default timings exact.
type jitter struct {
	mu   sync.Mutex
	frac float64
	rnd  *rand.Rand
}

// newJitter returns nil when frac is zero or less.
func newJitter(frac float64, seed int64) *jitter {
	if frac <= 0 {
		return nil
	}
	s := uint64(seed) //nolint:gosec // a seed's bits, not a quantity.
	//nolint:gosec // simulated timings, not a secret.
	return &jitter{frac: min(frac, 1), rnd: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))}
}

// spread returns d moved by a random share of up to frac of it, either way.
func (j *jitter) spread(d time.Duration) time.Duration {
	if j == nil || d <= 0 {
		return d
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return d + time.Duration((2*j.rnd.Float64()-1)*j.frac*float64(d))
}

// timing holds the per-object timing state beside the pacer's clocks.
type timing struct {
	mu sync.Mutex
	// steps overrides Options.ImportSteps for some DataVolumes.
	steps map[string]int
	// hidden is the progress of DataVolumes reporting "N/A" meanwhile.
	hidden map[string]cdiv1.DataVolumeProgress
}

func newTiming() *timing {
	return &timing{steps: map[string]int{}, hidden: map[string]cdiv1.DataVolumeProgress{}}
}

// SetImportSteps makes the DataVolume namespace/name report steps progress
// updates instead of Options.ImportSteps, so that one long import can run
// among short ones. Set it before the import starts; zero or less undoes it.
func (s *Simulator) SetImportSteps(namespace, name string, steps int) {
	s.timing.mu.Lock()
	defer s.timing.mu.Unlock()
	k := namespace + "/" + name
	if steps <= 0 {
		delete(s.timing.steps, k)
		return
	}
	s.timing.steps[k] = steps
}

func (s *Simulator) importSteps(dv *cdiv1.DataVolume) int {
	s.timing.mu.Lock()
	defer s.timing.mu.Unlock()
	if n, ok := s.timing.steps[dv.Namespace+"/"+dv.Name]; ok {
		return n
	}
	return s.opts.ImportSteps
}
