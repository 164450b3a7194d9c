package runnercore

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func job(id string, started time.Time) *macvirtv1alpha1.RunnerJob {
	t := metav1.NewTime(started)
	return &macvirtv1alpha1.RunnerJob{ID: id, StartedAt: &t}
}

func baseInput(assigned int, runners ...Facts) PlanInput {
	return PlanInput{Now: t0, Known: true, Assigned: assigned, MaxRunners: 5, JobTimeout: time.Hour,
		RegistrationTimeout: 10 * time.Minute, Runners: runners}
}

func TestDecide(t *testing.T) {
	recent := t0.Add(-time.Minute)
	cases := []struct {
		name        string
		in          PlanInput
		create      int
		desired     int
		released    map[string]string // name -> cleanup reason ("" for a normal end)
		states      map[string]macvirtv1alpha1.RunnerState
		warm        int32
		atMax       bool
		pendingWant int
	}{
		{name: "nothing assigned, nothing to do", in: baseInput(0)},
		{name: "jobs assigned create runners", in: baseInput(3), create: 3, desired: 3},
		{name: "creation never exceeds maxRunners", in: baseInput(9), create: 5, desired: 5, atMax: true},
		{name: "a Mac being released does not hold back a new runner",
			in:     baseInput(5, Facts{Name: "a", Created: recent, Deleting: true}, Facts{Name: "b", Created: recent, Deleting: true}),
			create: 5, desired: 5,
			states: map[string]macvirtv1alpha1.RunnerState{"a": macvirtv1alpha1.RunnerFinishing, "b": macvirtv1alpha1.RunnerFinishing}},
		{name: "a runner this plan releases is replaced by the next plan, not this one",
			in:       baseInput(5, Facts{Name: "a", Created: recent, Job: job("7", recent), Result: "succeeded"}),
			released: map[string]string{"a": ""}, create: 4, desired: 5},
		{name: "releases that never end hold at most twice maxRunners claims",
			in: baseInput(5, Facts{Name: "a", Created: recent, Deleting: true}, Facts{Name: "b", Created: recent, Deleting: true},
				Facts{Name: "c", Created: recent, Deleting: true}, Facts{Name: "d", Created: recent, Deleting: true},
				Facts{Name: "e", Created: recent, Deleting: true}, Facts{Name: "f", Created: recent, Deleting: true},
				Facts{Name: "g", Created: recent, Deleting: true}, Facts{Name: "h", Created: recent, Deleting: true}),
			create: 2, desired: 5},
		{name: "unknown statistics create and release nothing",
			in: PlanInput{Now: t0, Assigned: 0, MaxRunners: 5, JobTimeout: time.Hour, RegistrationTimeout: time.Hour,
				Runners: []Facts{{Name: "a", Created: recent, Bound: true}}},
			states: map[string]macvirtv1alpha1.RunnerState{"a": macvirtv1alpha1.RunnerProvisioning}, pendingWant: 1},
		{name: "held demand replaces runners for held jobs and releases none as surplus",
			in: func() PlanInput {
				in := baseInput(3, Facts{Name: "idle", Created: recent, Listed: true, Online: true},
					Facts{Name: "b", Created: recent, Bound: true}, Facts{Name: "c", Created: recent, Bound: true},
					Facts{Name: "d", Created: recent, Bound: true})
				in.Known, in.Held, in.Assigned = false, true, 1
				return in
			}(),
			desired: 1,
			states: map[string]macvirtv1alpha1.RunnerState{"idle": macvirtv1alpha1.RunnerIdle, "b": macvirtv1alpha1.RunnerProvisioning,
				"c": macvirtv1alpha1.RunnerProvisioning, "d": macvirtv1alpha1.RunnerProvisioning}},
		{name: "held demand makes runners for the held jobs that lost theirs",
			in: func() PlanInput {
				in := baseInput(0, Facts{Name: "a", Created: recent, Job: job("1", recent), Result: "succeeded"},
					Facts{Name: "b", Created: recent, Job: job("2", recent)})
				in.Known, in.Held, in.Assigned = false, true, 4
				return in
			}(),
			released: map[string]string{"a": ""}, create: 3, desired: 4},
		{name: "a completed job releases its runner",
			in:       baseInput(0, Facts{Name: "a", Created: recent, Job: job("7", recent), Result: "succeeded"}),
			released: map[string]string{"a": ""}},
		{name: "a runner whose task ended is released",
			in:       baseInput(1, Facts{Name: "a", Created: recent, TaskEnded: macvirtv1alpha1.BootstrapSucceeded}),
			released: map[string]string{"a": ""}, create: 1, desired: 1},
		{name: "a lost Mac is cleaned up and replaced",
			in:       baseInput(1, Facts{Name: "a", Created: recent, Lost: true, Job: job("7", recent)}),
			released: map[string]string{"a": CleanupMacLost}, create: 1, desired: 1},
		{name: "a job past the timeout is cleaned up",
			in:       baseInput(1, Facts{Name: "a", Created: t0.Add(-3 * time.Hour), Job: job("7", t0.Add(-2*time.Hour))}),
			released: map[string]string{"a": CleanupJobTimeout}, create: 1, desired: 1},
		{name: "a runner that never comes online is cleaned up",
			in:       baseInput(1, Facts{Name: "a", Created: t0.Add(-11 * time.Minute), Bound: true}),
			released: map[string]string{"a": CleanupRegistrationTimeout}, create: 1, desired: 1},
		{name: "surplus releases runners without a job, not-online first, newest first, never a running one",
			in: baseInput(1,
				Facts{Name: "running", Created: t0.Add(-5 * time.Minute), Job: job("1", recent)},
				Facts{Name: "idle", Created: t0.Add(-4 * time.Minute), Listed: true, Online: true},
				Facts{Name: "old", Created: t0.Add(-3 * time.Minute), Bound: true},
				Facts{Name: "new", Created: t0.Add(-2 * time.Minute)}),
			desired:  1,
			released: map[string]string{"idle": CleanupSurplus, "old": CleanupSurplus, "new": CleanupSurplus},
			states:   map[string]macvirtv1alpha1.RunnerState{"running": macvirtv1alpha1.RunnerRunning}},
		{name: "surplus of one takes the newest runner that is not online",
			in: baseInput(2,
				Facts{Name: "idle", Created: t0.Add(-4 * time.Minute), Listed: true, Online: true},
				Facts{Name: "old", Created: t0.Add(-3 * time.Minute), Bound: true},
				Facts{Name: "new", Created: t0.Add(-2 * time.Minute)}),
			desired:     2,
			released:    map[string]string{"new": CleanupSurplus},
			states:      map[string]macvirtv1alpha1.RunnerState{"idle": macvirtv1alpha1.RunnerIdle, "old": macvirtv1alpha1.RunnerProvisioning},
			pendingWant: 1},
		{name: "running jobs beyond the desired count are never surplus",
			in: baseInput(0,
				Facts{Name: "a", Created: recent, Job: job("1", recent)},
				Facts{Name: "b", Created: recent, Listed: true, Busy: true}),
			states: map[string]macvirtv1alpha1.RunnerState{"a": macvirtv1alpha1.RunnerRunning, "b": macvirtv1alpha1.RunnerRunning}},
		{name: "the warm pool keeps minIdle plus the runners still waiting for a Mac, up to maxRunners",
			in: func() PlanInput {
				in := baseInput(4, Facts{Name: "a", Created: recent}, Facts{Name: "b", Created: recent, Bound: true})
				in.OwnsPool, in.MinIdle = true, 2
				return in
			}(),
			create: 2, desired: 4, warm: 5, pendingWant: 2,
			states: map[string]macvirtv1alpha1.RunnerState{"a": macvirtv1alpha1.RunnerProvisioning, "b": macvirtv1alpha1.RunnerProvisioning}},
		{name: "an idle warm pool keeps minIdle",
			in:   func() PlanInput { in := baseInput(0); in.OwnsPool, in.MinIdle = true, 2; return in }(),
			warm: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.in)
			if p.Create != tc.create || p.Desired != tc.desired || p.AtMax != tc.atMax || p.WarmIdle != tc.warm {
				t.Errorf("create %d desired %d atMax %t warm %d, want %d %d %t %d", p.Create, p.Desired, p.AtMax, p.WarmIdle,
					tc.create, tc.desired, tc.atMax, tc.warm)
			}
			if tc.pendingWant != 0 && p.Pending != tc.pendingWant {
				t.Errorf("pending %d, want %d", p.Pending, tc.pendingWant)
			}
			released := map[string]string{}
			for _, d := range p.Runners {
				if d.Release {
					released[d.Name] = d.Cleanup
					if d.State != macvirtv1alpha1.RunnerFinishing || d.Message == "" {
						t.Errorf("released %s is %s with message %q", d.Name, d.State, d.Message)
					}
				}
				if want, ok := tc.states[d.Name]; ok && d.State != want {
					t.Errorf("%s is %s, want %s", d.Name, d.State, want)
				}
			}
			if len(released) != len(tc.released) {
				t.Errorf("released %v, want %v", released, tc.released)
			}
			for n, why := range tc.released {
				if got, ok := released[n]; !ok || got != why {
					t.Errorf("released %v, want %v", released, tc.released)
				}
			}
			total, active := len(tc.in.Runners)+p.Create, p.Create
			for i, d := range p.Runners {
				if d.State != macvirtv1alpha1.RunnerFinishing || !tc.in.Runners[i].Deleting {
					active++
				}
			}
			if active > tc.in.MaxRunners || total > MaxClaims(tc.in.MaxRunners) {
				t.Errorf("%d runners that may take a job and %d claims would exist, maxRunners %d", active, total, tc.in.MaxRunners)
			}
		})
	}
}

// TestHeld follows a hold through a gap: runners that end (since the
// status the hold started from) take a held job with them, runners made
// during the gap join it, and once every held job
// has left with a runner none remains to make a runner for.
func TestHeld(t *testing.T) {
	recent := t0.Add(-time.Minute)
	run := func(name string) Facts { return Facts{Name: name, Created: recent, Job: job(name, recent)} }
	done := func(name string) Facts { f := run(name); f.Result = "succeeded"; return f }
	steps := []struct {
		name      string
		runners   []Facts
		remaining int
	}{
		{"at the start: the three shown active, one finished since, one finishing from before",
			[]Facts{run("a"), run("b"), run("c"), done("x"), {Name: "old", Created: recent, Deleting: true}}, 5},
		{"a's job completed", []Facts{done("a"), run("b"), run("c"), {Name: "old", Created: recent, Deleting: true}}, 4},
		{"a is gone, d was made", []Facts{run("b"), run("c"), {Name: "d", Created: recent}}, 4},
		{"b's runner exited, c's Mac was lost", []Facts{{Name: "b", Created: recent, TaskEnded: macvirtv1alpha1.BootstrapSucceeded},
			{Name: "c", Created: recent, Lost: true}, {Name: "d", Created: recent}}, 2},
		{"all of them gone, d never came online", []Facts{{Name: "d", Created: recent, Deleting: true}}, 1},
		{"two more made and done, one of them between two looks", []Facts{done("e"), done("f")}, 0},
		{"a hold never goes below none", []Facts{done("e"), done("f"), done("g")}, 0},
	}
	h := StartHold(6, []macvirtv1alpha1.RunnerStatus{{Name: "a", State: macvirtv1alpha1.RunnerRunning},
		{Name: "b", State: macvirtv1alpha1.RunnerIdle}, {Name: "c", State: macvirtv1alpha1.RunnerProvisioning},
		{Name: "x", State: macvirtv1alpha1.RunnerRunning}, {Name: "old", State: macvirtv1alpha1.RunnerFinishing}})
	for _, st := range steps {
		before := h.Remaining()
		next := Held(h, st.runners)
		if h.Remaining() != before {
			t.Fatalf("%s: Held changed the hold it was given", st.name)
		}
		h = next
		if got := h.Remaining(); got != st.remaining {
			t.Errorf("%s: %d held jobs remain, want %d (%v)", st.name, got, st.remaining, h.Runners)
		}
	}
}

func TestOwnsName(t *testing.T) {
	name := RunnerName("ios")
	if !OwnsName("ios", name) {
		t.Fatalf("%s not recognised as the set's", name)
	}
	for _, other := range []string{"ios", "ios-", "ios-abc", "ios-abcdef", "iosx-abcde", "android-abcde", "ios-ab-cd-ef"} {
		if OwnsName("ios", other) {
			t.Errorf("%s taken for the set's", other)
		}
	}
}
