package main

import (
	"testing"
	"time"
)

func TestMachineCPUReadsProcStat(t *testing.T) {
	busy0, all0, cpus, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if cpus < 1 || busy0 <= 0 || all0 < busy0 {
		t.Fatalf("busy %.2f s of %.2f s on %d CPUs", busy0, all0, cpus)
	}
	// Spin long enough for a few clock ticks to pass.
	spins := 0
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		spins++
	}
	t.Logf("%d spins", spins)
	busy1, all1, _, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if busy1 <= busy0 || all1 <= all0 {
		t.Fatalf("after 100 ms of spinning: busy %.2f → %.2f s, all %.2f → %.2f s", busy0, busy1, all0, all1)
	}
}
