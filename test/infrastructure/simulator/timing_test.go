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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// TestPacerJitter: without jitter a step lasts exactly its duration; with
// it, each step's duration is drawn once within ±Jitter and kept while the
// object stays in the state, and a seed repeats the same draws.
func TestPacerJitter(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	draws := func(p *pacer) []time.Duration {
		p.now = func() time.Time { return now }
		var out []time.Duration
		for i := range 50 {
			out = append(out, p.wait("k", "uid", fmt.Sprint("state-", i), 2*time.Second))
		}
		return out
	}
	for _, d := range draws(newPacer(nil)) {
		g.Expect(d).To(Equal(2 * time.Second))
	}
	first := draws(newPacer(newJitter(0.2, 42)))
	g.Expect(draws(newPacer(newJitter(0.2, 42)))).To(Equal(first), "one seed, one sequence")
	distinct := map[time.Duration]bool{}
	for _, d := range first {
		g.Expect(d).To(BeNumerically("~", 2*time.Second, 400*time.Millisecond))
		distinct[d] = true
	}
	g.Expect(len(distinct)).To(BeNumerically(">", 10))

	p := newPacer(newJitter(0.2, 42))
	p.now = func() time.Time { return now }
	d := p.wait("k", "uid", "s", 2*time.Second)
	now = now.Add(time.Second)
	g.Expect(p.wait("k", "uid", "s", 2*time.Second)).To(Equal(d-time.Second), "the drawn duration is kept")
}

func TestRealisticAndScaled(t *testing.T) {
	g := NewWithT(t)
	o := Realistic(1)
	g.Expect(o.StepInterval).To(Equal(2*time.Second), "CDI reads progress every 2 s")
	g.Expect(time.Duration(o.ImportSteps)*o.StepInterval).To(BeNumerically(">=", time.Minute), "imports take minutes")
	s := o.Scaled(4)
	g.Expect(s.StepInterval).To(Equal(500 * time.Millisecond))
	g.Expect(s.StartDelay).To(Equal(o.StartDelay / 4))
	g.Expect(s.ImportSteps).To(Equal(o.ImportSteps))
	g.Expect(s.Jitter).To(Equal(o.Jitter))
	g.Expect(s.SnapshotDelay).To(Equal(o.SnapshotDelay / 4))
	g.Expect(s.CloneDurations[cdiv1.CloneStrategySnapshot]).To(Equal(o.CloneDurations[cdiv1.CloneStrategySnapshot] / 4))
	g.Expect(o.CloneDurations[cdiv1.CloneStrategySnapshot]).To(Equal(RealisticSnapshotClone), "scaling copies the map")
	// A 128 GiB host-assisted copy takes minutes, a snapshot clone seconds.
	g.Expect(128 * o.CloneDurations[cdiv1.CloneStrategyHostAssisted]).To(BeNumerically(">", 4*o.CloneDurations[cdiv1.CloneStrategySnapshot]))
	g.Expect(o.Scaled(0)).To(Equal(o))
}

// TestProgressUnknownFault walks an import through the
// DataVolumeProgressUnknown fault: "N/A" mid-import, held while the fault
// is on, resumed from the hidden progress once it is cleared.
func TestProgressUnknownFault(t *testing.T) {
	g := NewWithT(t)
	sim := New(nil, Options{ImportSteps: 4})
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk"}}
	tick := func() string {
		st, ok := sim.nextDataVolumeTick(dv, dvFaults{})
		if !ok {
			return "no step"
		}
		dv.Status = st
		return string(st.Phase) + " " + string(st.Progress)
	}
	fault := Fault{Kind: DataVolumeProgressUnknown, Namespace: "ns", Name: "disk"}
	var seen []string
	for range 4 {
		seen = append(seen, tick())
	}
	sim.Inject(fault)
	seen = append(seen, tick(), tick())
	sim.Clear(fault)
	for range 3 {
		seen = append(seen, tick())
	}
	g.Expect(seen).To(Equal([]string{
		"Pending N/A", "ImportScheduled N/A", "ImportInProgress 0.00%", "ImportInProgress 25.00%",
		"ImportInProgress N/A", "no step",
		"ImportInProgress 50.00%", "ImportInProgress 75.00%", "Succeeded 100.0%",
	}))

	sim.SetImportSteps("ns", "long", 10)
	long := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "long"},
		Status: cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Progress: "0.00%"}}
	st, ok := sim.nextDataVolumeTick(long, dvFaults{})
	g.Expect(ok).To(BeTrue())
	g.Expect(st.Progress).To(Equal(cdiv1.DataVolumeProgress("10.00%")), "SetImportSteps sets this DataVolume's steps")
}
