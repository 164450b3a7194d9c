package main

import (
	"testing"
	"time"
)

// The median line gives each figure's median, p99 and the longest wait
// too, not those of the run whose p50 is the median.
func TestMedianCIIsEachFiguresMedian(t *testing.T) {
	run := func(p50, p99 time.Duration, cpu float64) ciResult {
		waits := make([]time.Duration, 0, 100)
		for i := range 100 {
			switch {
			case i < 40:
				waits = append(waits, p50/2)
			case i < 98:
				waits = append(waits, p50)
			default:
				waits = append(waits, p99)
			}
		}
		r := ciResult{waits: waits, cpu: cpu}
		r.figures()
		return r
	}
	m := medianCI([]ciResult{
		run(120*time.Second, 300*time.Second, 3), // the median p50
		run(125*time.Second, 290*time.Second, 1),
		run(115*time.Second, 280*time.Second, 2),
	})
	if m.p50 != 120*time.Second || m.p99 != 290*time.Second || m.most != 290*time.Second || m.cpu != 2 {
		t.Errorf("median: p50 %s, p99 %s, most %s, cpu %.0f; want 2m0s, 4m50s, 4m50s, 2", m.p50, m.p99, m.most, m.cpu)
	}
}
