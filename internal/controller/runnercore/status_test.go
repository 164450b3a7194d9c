package runnercore

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// problem is a reason of a kind's own, with a message that names it.
func problem(reason string) *base.Problem {
	return &base.Problem{Reason: reason, Message: "because " + reason}
}

// serving is the readiness of a fleet connected to its CI service and
// told nothing bad, in reasons and words of its kind's own.
func serving() Readiness {
	return Readiness{Connected: true, Connecting: *problem("Connecting"), AtMax: *problem("AtMax"), Serving: *problem("Serving")}
}

func TestReadyPrecedence(t *testing.T) {
	cases := map[string]struct {
		scope   Scope
		ready   func(*Readiness)
		status  metav1.ConditionStatus
		reason  string
		stalled string // the stalling problem's reason; empty when none
	}{
		"a fleet that serves is Ready": {status: metav1.ConditionTrue, reason: "Serving"},
		"more jobs than the maximum is Ready, and says so": {scope: Scope{Plan: Plan{AtMax: true}},
			status: metav1.ConditionTrue, reason: "AtMax"},
		"a failed write outranks the maximum": {scope: Scope{Plan: Plan{AtMax: true}, Failed: problem("CleanupFailed")},
			status: metav1.ConditionFalse, reason: "CleanupFailed"},
		"not connected outranks a failed write": {scope: Scope{Failed: problem("CleanupFailed")},
			ready:  func(r *Readiness) { r.Connected = false },
			status: metav1.ConditionFalse, reason: "Connecting"},
		"the service failing outranks not connected": {
			ready:  func(r *Readiness) { r.Connected, r.Failing = false, problem("Unavailable") },
			status: metav1.ConditionFalse, reason: "Unavailable"},
		"the service failing takes Ready from a connected fleet when its kind says so": {
			ready:  func(r *Readiness) { r.Failing = problem("Unavailable") },
			status: metav1.ConditionFalse, reason: "Unavailable"},
		"refused credentials outrank failing, and stall": {
			ready: func(r *Readiness) {
				r.Connected, r.Failing, r.Refused = false, problem("Unavailable"), problem("CredentialsInvalid")
			},
			status: metav1.ConditionFalse, reason: "CredentialsInvalid", stalled: "CredentialsInvalid"},
		"a blocked reconcile outranks everything, and stalls": {scope: Scope{Blocked: problem("ClassUnavailable"), Failed: problem("CleanupFailed")},
			ready:  func(r *Readiness) { r.Connected, r.Refused = false, problem("CredentialsInvalid") },
			status: metav1.ConditionFalse, reason: "ClassUnavailable", stalled: "ClassUnavailable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := serving()
			if tc.ready != nil {
				tc.ready(&r)
			}
			ready, stalled := Ready(&tc.scope, r)
			if ready.Status != tc.status || ready.Reason != tc.reason || ready.Message != "because "+tc.reason {
				t.Errorf("Ready %s %s %q, want %s %s", ready.Status, ready.Reason, ready.Message, tc.status, tc.reason)
			}
			if got := reasonOf(stalled); got != tc.stalled {
				t.Errorf("stalled by %q, want %q", got, tc.stalled)
			}
		})
	}
}

func reasonOf(p *base.Problem) string {
	if p == nil {
		return ""
	}
	return p.Reason
}

func TestFleetStatus(t *testing.T) {
	idle := int32(2)
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "runners-ci-ios"}, Spec: macvirtv1alpha1.MacPoolSpec{Idle: &idle}}
	old := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Serving", Message: "old", ObservedGeneration: 6}
	other := metav1.Condition{Type: "Deleting", Status: metav1.ConditionFalse, Reason: "AsExpected"}
	cases := map[string]struct {
		scope    Scope
		pool     string
		warmIdle int32
		ready    metav1.ConditionStatus
		stalled  metav1.ConditionStatus
	}{
		"counts come from the plan": {ready: metav1.ConditionTrue, stalled: metav1.ConditionFalse},
		"the warm pool and its idle target show": {scope: Scope{Pool: pool},
			pool: "runners-ci-ios", warmIdle: 2, ready: metav1.ConditionTrue, stalled: metav1.ConditionFalse},
		"a pool without an idle target shows its name only": {scope: Scope{Pool: &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}},
			pool: "p", ready: metav1.ConditionTrue, stalled: metav1.ConditionFalse},
		"a blocked fleet is Stalled": {scope: Scope{Blocked: problem("ClassUnavailable")},
			ready: metav1.ConditionFalse, stalled: metav1.ConditionTrue},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.scope
			s.Plan = Plan{Desired: 3, Pending: 1, Idle: 1, Running: 2}
			had := []metav1.Condition{old, other}
			st := FleetStatus(&s, 7, had, serving())
			if st.ObservedGeneration != 7 || st.Desired != 3 || st.Pending != 1 || st.Running != 2 {
				t.Errorf("generation %d, desired/pending/running %d/%d/%d, want 7 and the plan's 3/1/2", st.ObservedGeneration, st.Desired, st.Pending, st.Running)
			}
			if st.WarmPoolName != tc.pool || st.WarmIdle != tc.warmIdle {
				t.Errorf("warm pool %q idle %d, want %q %d", st.WarmPoolName, st.WarmIdle, tc.pool, tc.warmIdle)
			}
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Status != tc.ready || ready.ObservedGeneration != 7 {
				t.Errorf("Ready %+v, want %s at generation 7", ready, tc.ready)
			}
			stalled := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
			if stalled == nil || stalled.Status != tc.stalled || stalled.ObservedGeneration != 7 {
				t.Errorf("Stalled %+v, want %s at generation 7", stalled, tc.stalled)
			}
			if meta.FindStatusCondition(st.Conditions, "Deleting") == nil {
				t.Error("a condition of the kind's own was dropped")
			}
			if had[0] != old {
				t.Errorf("the object's own conditions were changed: %+v", had[0])
			}
		})
	}
}

func TestRunnerStatusesAreSortedByName(t *testing.T) {
	if got := RunnerStatuses(Plan{}); got != nil {
		t.Errorf("no runners listed as %#v, want nil (as a status read back has it)", got)
	}
	p := Plan{Runners: []Decision{
		{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: "ios-c", State: macvirtv1alpha1.RunnerIdle}},
		{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: "ios-a", State: macvirtv1alpha1.RunnerRunning}},
		{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: "ios-b", State: macvirtv1alpha1.RunnerProvisioning}},
	}}
	got := RunnerStatuses(p)
	var names []string
	for _, r := range got {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "ios-a,ios-b,ios-c" || got[0].State != macvirtv1alpha1.RunnerRunning {
		t.Errorf("listed %v (%+v)", names, got)
	}
	if p.Runners[0].Name != "ios-c" {
		t.Error("sorting the status reordered the plan")
	}
}

func TestServiceError(t *testing.T) {
	reset := t0.Add(30 * time.Minute)
	cases := map[string]struct {
		code    int
		message string
		reset   *time.Time
		wantLen int
	}{
		"an answer with its status":           {code: 503, message: "503 Service Unavailable", wantLen: 23},
		"no answer has no status":             {message: "dial tcp: connection refused", wantLen: 28},
		"a rate limit says when it resets":    {code: 429, message: "rate limit spent", reset: &reset, wantLen: 16},
		"a long answer is cut for the status": {code: 502, message: strings.Repeat("<html>", 400), wantLen: maxServiceMessage},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := ServiceError(t0, tc.code, tc.message, tc.reset)
			if !e.Time.Time.Equal(t0) || int(e.StatusCode) != tc.code || len(e.Message) != tc.wantLen || !strings.HasPrefix(tc.message, e.Message) {
				t.Errorf("%+v", e)
			}
			if (e.RateLimitReset != nil) != (tc.reset != nil) || tc.reset != nil && !e.RateLimitReset.Time.Equal(*tc.reset) {
				t.Errorf("rate limit reset %v, want %v", e.RateLimitReset, tc.reset)
			}
		})
	}
}
