package bootstrap

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func part(name string, state macvirtv1alpha1.BootstrapState, mods ...func(*macvirtv1alpha1.BootstrapPartStatus)) macvirtv1alpha1.BootstrapPartStatus {
	p := macvirtv1alpha1.BootstrapPartStatus{Name: name, TaskOutcome: macvirtv1alpha1.TaskOutcome{State: state}, HoldReady: true}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func TestPlanRunsTheClassesPartFirstAndOnlyWhatExists(t *testing.T) {
	off := false
	b := &macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "true"}}
	free := &macvirtv1alpha1.Bootstrap{Script: b.Script, HoldReady: &off}
	class := &macvirtv1alpha1.MacClass{Spec: macvirtv1alpha1.MacClassSpec{Bootstrap: b}}
	claim := &macvirtv1alpha1.MacClaim{Spec: macvirtv1alpha1.MacClaimSpec{Bootstrap: free}}
	got := Plan(class, claim)
	if len(got) != 2 || got[0].Name != "class" || got[1].Name != "claim" || !got[0].HoldReady || got[1].HoldReady ||
		got[0].State != macvirtv1alpha1.BootstrapPending {
		t.Errorf("Plan = %+v", got)
	}
	if got := Plan(nil, &macvirtv1alpha1.MacClaim{}); len(got) != 0 {
		t.Errorf("nothing to run: %+v", got)
	}
}

func TestObserve(t *testing.T) {
	exit := int32(2)
	guest := &macvirtv1alpha1.GuestStatus{Tasks: []macvirtv1alpha1.GuestTaskStatus{
		{ID: "u-class", TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapFailed, ExitCode: &exit, OutputTail: "boom"}},
		{ID: "u-claim", TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapPending, Message: "Secret team-a/x does not exist"}},
		{ID: "old-claim", TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapSucceeded}},
	}}
	cases := map[string]struct {
		parts []macvirtv1alpha1.BootstrapPartStatus
		guest *macvirtv1alpha1.GuestStatus
		want  []macvirtv1alpha1.BootstrapPartStatus
	}{
		"reports by id": {
			[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Pending"), part("claim", "Pending")}, guest,
			[]macvirtv1alpha1.BootstrapPartStatus{
				part("class", "Failed", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.ExitCode, p.OutputTail = &exit, "boom" }),
				part("claim", "Pending", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.Message = "Secret team-a/x does not exist" })},
		},
		"a finished part stays": {
			[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Succeeded")}, guest,
			[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Succeeded")},
		},
		"a part seen running is never pending again": {
			[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Running")}, nil,
			[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Running")},
		},
		"unreported is pending without a stale message": {
			[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Pending", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.Message = "old" })}, nil,
			[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Pending")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Observe(tc.parts, "u", tc.guest)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v", got)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Name != w.Name || g.State != w.State || g.Message != w.Message || g.OutputTail != w.OutputTail || (g.ExitCode == nil) != (w.ExitCode == nil) {
					t.Errorf("part %d: got %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	exit := int32(3)
	started := metav1.NewTime(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	failed := part("class", "Failed", func(p *macvirtv1alpha1.BootstrapPartStatus) {
		p.ExitCode, p.Duration = &exit, &metav1.Duration{Duration: 2 * time.Second}
	})
	cases := map[string]struct {
		parts           []macvirtv1alpha1.BootstrapPartStatus
		protocol        string
		status          metav1.ConditionStatus
		reason, message string
		holds, warning  bool
	}{
		"pending":              {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Pending")}, "v2", "False", "BootstrapPending", "waiting for the guest agent to take the claim's bootstrap", true, false},
		"a v1 agent":           {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Pending")}, "v1", "False", "AgentTooOld", "speaks protocol v1", true, true},
		"a source unavailable": {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Pending", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.Message = "Secret team-a/x does not exist" })}, "v2", "False", "SourceUnavailable", "Secret team-a/x does not exist", true, false},
		"running":              {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Running", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.StartedAt = &started })}, "v2", "False", "Running", "running since 2026-12-01T08:00:00Z", true, false},
		"failed, the rest not run": {[]macvirtv1alpha1.BootstrapPartStatus{failed, part("claim", "Pending")}, "v2", "False", "Failed",
			"the class's bootstrap failed: exit status 3 after 2s; kubectl mac logs shows the end of its output; the claim's bootstrap does not run", true, true},
		"timed out":                       {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "TimedOut", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.Message = "killed" })}, "v2", "False", "TimedOut", "timed out: killed", true, true},
		"succeeded":                       {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Succeeded"), part("claim", "Succeeded")}, "v2", "True", "Succeeded", "the class's and the claim's bootstrap succeeded", false, false},
		"a part that does not hold Ready": {[]macvirtv1alpha1.BootstrapPartStatus{part("claim", "Running", func(p *macvirtv1alpha1.BootstrapPartStatus) { p.HoldReady = false })}, "v2", "False", "Running", "running", false, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, ok := Summarize(tc.parts, tc.protocol)
			if !ok || s.Status != tc.status || s.Reason != tc.reason || s.HoldsReady != tc.holds || s.Warning != tc.warning || !contains(s.Message, tc.message) {
				t.Errorf("got %+v (%v), want %s %s %q holds=%v warning=%v", s, ok, tc.status, tc.reason, tc.message, tc.holds, tc.warning)
			}
		})
	}
	if _, ok := Summarize(nil, "v2"); ok {
		t.Error("no parts: no condition")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestNextHandsOnePartAtATimeAndNoneAfterAFailure(t *testing.T) {
	cases := map[string]struct {
		parts []macvirtv1alpha1.BootstrapPartStatus
		want  string // "" for none
	}{
		"the first":             {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Pending"), part("claim", "Pending")}, "class"},
		"the running one":       {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Running"), part("claim", "Pending")}, "class"},
		"after a success":       {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Succeeded"), part("claim", "Pending")}, "claim"},
		"none after a failure":  {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "TimedOut"), part("claim", "Pending")}, ""},
		"none when all is done": {[]macvirtv1alpha1.BootstrapPartStatus{part("class", "Succeeded")}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, ok := Next(tc.parts)
			if (tc.want == "") == ok || (ok && p.Name != tc.want) {
				t.Errorf("Next = %q %v, want %q", p.Name, ok, tc.want)
			}
		})
	}
}
