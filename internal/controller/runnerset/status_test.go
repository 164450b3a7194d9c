package runnerset

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

func TestComputeRunnerSetStatus(t *testing.T) {
	set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci", Generation: 3},
		Spec: macvirtv1alpha1.MacRunnerSetSpec{MaxRunners: 2, GitHub: macvirtv1alpha1.GitHubRunnerTarget{URL: "https://github.com/acme"}}}
	reset := t0.Add(30 * time.Minute)
	cases := []struct {
		name    string
		scope   setScope
		ready   metav1.ConditionStatus
		reason  string
		stalled bool
		msg     string
		ghErr   bool
	}{
		{name: "listening", scope: setScope{Demand: Demand{Listening: true, Known: true, ScaleSetID: 7, Assigned: 1},
			Scope: runnercore.Scope{Plan: runnercore.Plan{Desired: 1, Running: 1, Runners: []runnercore.Decision{{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: "ios-abcde", State: macvirtv1alpha1.RunnerRunning}}}}}},
			ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonListening, msg: "1 jobs assigned, 1 runners (0 pending, 0 idle, 1 running)"},
		{name: "a missing Secret needs a human", scope: setScope{Scope: runnercore.Scope{Blocked: &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: "Secret ci/gh does not exist"}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonCredentialsInvalid, stalled: true, msg: "ci/gh"},
		{name: "a 401 names the credential and needs a human", scope: setScope{Demand: Demand{Err: &Problem{At: t0,
			Explanation: github.Explanation{StatusCode: 401, Credentials: true, Message: "GitHub refused the token in Secret ci/gh (key token) (401): Bad credentials"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonCredentialsInvalid, stalled: true, msg: "the token in Secret ci/gh", ghErr: true},
		{name: "a rate limit says when it resets", scope: setScope{Demand: Demand{Err: &Problem{At: t0,
			Explanation: github.Explanation{StatusCode: 403, RateLimit: &reset, Message: "GitHub's rate limit ... is spent until 12:30"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonRateLimited, msg: "spent until", ghErr: true},
		{name: "a session held by another listener", scope: setScope{Demand: Demand{Err: &Problem{At: t0,
			Explanation: github.Explanation{StatusCode: 409, Conflict: true, Message: "another listener holds the scale set's message session"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonSessionConflict, ghErr: true},
		{name: "5xx", scope: setScope{Demand: Demand{Err: &Problem{At: t0, Explanation: github.Explanation{StatusCode: 503, Message: "503 Service Unavailable"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonGitHubUnavailable, ghErr: true},
		{name: "connecting", scope: setScope{}, ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonConnecting},
		{name: "at max runners", scope: setScope{Demand: Demand{Listening: true, Known: true, Assigned: 5}, Scope: runnercore.Scope{Plan: runnercore.Plan{AtMax: true, Desired: 2}}},
			ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonAtMaxRunners, msg: "3 jobs wait"},
		{name: "an old error stays out of a listening set's status", scope: setScope{Demand: Demand{Listening: true, Known: true,
			Err: &Problem{At: t0.Add(-time.Hour), Explanation: github.Explanation{Message: "old"}}}},
			ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonListening},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.scope
			s.Set = set
			st := computeRunnerSetStatus(&s, t0)
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			stalled := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
			if ready.Status != tc.ready || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.msg) || ready.ObservedGeneration != 3 {
				t.Errorf("Ready %s %s %q", ready.Status, ready.Reason, ready.Message)
			}
			if (stalled.Status == metav1.ConditionTrue) != tc.stalled {
				t.Errorf("Stalled %s %s", stalled.Status, stalled.Reason)
			}
			if (st.LastGitHubError != nil) != tc.ghErr {
				t.Errorf("lastGitHubError %+v", st.LastGitHubError)
			}
			if tc.scope.Demand.Err != nil && tc.scope.Demand.Err.RateLimit != nil && (st.LastGitHubError.RateLimitReset == nil || !st.LastGitHubError.RateLimitReset.Time.Equal(reset)) {
				t.Errorf("rate limit reset %v", st.LastGitHubError.RateLimitReset)
			}
		})
	}
}

func TestExplainNamesTheCredential(t *testing.T) {
	scope, err := github.ParseScope("https://ghe.example/acme/app")
	if err != nil {
		t.Fatal(err)
	}
	c, err := github.New(scope, github.Credentials{Token: "x", Secret: "ci/gh"}, github.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := c.Explain(errors.New(`request POST https://ghe.example/api/v3/repos/acme/app/actions/runners/registration-token failed(status="401 Unauthorized"): Bad credentials`))
	if e.StatusCode != 401 || !e.Credentials || !strings.Contains(e.Message, "the token in Secret ci/gh (key token)") {
		t.Errorf("%+v", e)
	}
}
