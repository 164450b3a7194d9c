package buildkitequeue

import (
	"strings"
	"testing"
	"time"

	"github.com/buildkite/stacksapi"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func TestComputeBuildkiteQueueStatus(t *testing.T) {
	q := &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci", Generation: 2},
		Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{MaxAgents: 2, Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: "macos", TokenSecretName: "bk"}}}
	polled := &poll{Registered: true, Known: true}
	cases := []struct {
		name    string
		scope   queueScope
		ready   metav1.ConditionStatus
		reason  string
		stalled bool
		msg     string
		reset   time.Time // lastBuildkiteError.rateLimitReset; zero for none
	}{
		{name: "polling", scope: queueScope{Poll: polled, Scope: runnercore.Scope{Assigned: 1, Plan: runnercore.Plan{Desired: 1, Running: 1,
			Runners: []runnercore.Decision{{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: "ios-abcde", State: macvirtv1alpha1.RunnerRunning}}}}}},
			ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonPolling, msg: `stack "macvirt-ci-ios-43c3292d" polls queue "macos": 1 jobs want a Mac, 1 agents (0 pending, 1 running)`},
		{name: "a missing Secret needs a human", scope: queueScope{Poll: &poll{}, Scope: runnercore.Scope{Blocked: &base.Problem{
			Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: "Secret ci/bk does not exist"}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonCredentialsInvalid, stalled: true, msg: "ci/bk"},
		{name: "a refused token names its Secret and needs a human", scope: queueScope{Poll: &poll{Err: &problem{At: t0,
			Explanation: buildkite.Explanation{StatusCode: 401, Credentials: true, Message: "Buildkite refused the agent token in Secret ci/bk (key token) (401)"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonCredentialsInvalid, stalled: true, msg: "Secret ci/bk"},
		{name: "an outage is not a human's problem", scope: queueScope{Poll: &poll{Registered: true, Err: &problem{At: t0,
			Explanation: buildkite.Explanation{StatusCode: 503, Message: "Buildkite answered 503"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonBuildkiteUnavailable, msg: "503"},
		{name: "a rate limit says when it resets", scope: queueScope{Poll: &poll{Registered: true, Known: true, Err: &problem{At: t0,
			Explanation: buildkite.Explanation{StatusCode: 429, RateLimitReset: 42 * time.Second, Message: "Buildkite's rate limit is spent (429)"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonBuildkiteUnavailable, msg: "rate limit", reset: t0.Add(42 * time.Second)},
		{name: "a reservation refused while polling shows, and Ready goes", scope: queueScope{Poll: &poll{Registered: true, Known: true, Err: &problem{At: t0,
			Explanation: buildkite.Explanation{StatusCode: 500, Message: "Buildkite answered 500"}}}},
			ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonBuildkiteUnavailable, msg: "500"},
		{name: "connecting", scope: queueScope{Poll: &poll{}}, ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonConnectingBuildkite,
			msg: `registering stack "macvirt-ci-ios-43c3292d" on queue "macos"`},
		{name: "at max agents", scope: queueScope{Poll: polled, Scope: runnercore.Scope{Assigned: 5, Plan: runnercore.Plan{AtMax: true, Desired: 2}}},
			ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonAtMaxAgents, msg: "5 jobs want a Mac and maxAgents is 2: 3 wait"},
		{name: "a failed write shows", scope: queueScope{Poll: polled, Scope: runnercore.Scope{Failed: &base.Problem{Reason: macvirtv1alpha1.ReasonRunnerCleanup,
			Message: "releasing claim ios-abcde: forbidden"}}}, ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonRunnerCleanup, msg: "forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.scope
			s.Queue = q
			st := computeBuildkiteQueueStatus(&s)
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason || !strings.Contains(ready.Message, tc.msg) {
				t.Fatalf("Ready = %+v, want %s %s containing %q", ready, tc.ready, tc.reason, tc.msg)
			}
			if got := meta.IsStatusConditionTrue(st.Conditions, macvirtv1alpha1.ConditionStalled); got != tc.stalled {
				t.Errorf("Stalled = %t, want %t", got, tc.stalled)
			}
			if (s.Poll.Err != nil) != (st.LastBuildkiteError != nil) {
				t.Errorf("lastBuildkiteError %+v with error %+v", st.LastBuildkiteError, s.Poll.Err)
			}
			var reset time.Time
			if e := st.LastBuildkiteError; e != nil && e.RateLimitReset != nil {
				reset = e.RateLimitReset.Time
			}
			if !reset.Equal(tc.reset) {
				t.Errorf("rateLimitReset %s, want %s", reset, tc.reset)
			}
			if want := map[bool]string{true: "macvirt-ci-ios-43c3292d"}[s.Poll.Registered]; st.StackKey != want || st.ObservedGeneration != 2 {
				t.Errorf("stackKey %q observedGeneration %d; want the key only once registered (%q)", st.StackKey, st.ObservedGeneration, want)
			}
		})
	}
}

func TestEndedStatesReleaseTheMac(t *testing.T) {
	for _, state := range []string{"finished", "canceled", "timed_out", "expired", "skipped", "broken"} {
		if !ended(state) {
			t.Errorf("%s is not ended", state)
		}
	}
	for _, state := range []string{"scheduled", "assigned", "accepted", "running", "canceling", "timing_out", "a_state_buildkite_adds_later"} {
		if ended(state) {
			t.Errorf("%s is ended: its Mac would go while the job runs", state)
		}
	}
}

func TestAgentScriptFindsTheAgent(t *testing.T) {
	q := &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci"}}
	if s := agentScript(q); !strings.Contains(s, "agent='buildkite-agent'") || !strings.Contains(s, `exec "$agent" start --acquire-job "$BUILDKITE_AGENT_ACQUIRE_JOB"`) {
		t.Errorf("default script:\n%s", s)
	}
	q.Spec.Agent.Path = "bin/buildkite-agent"
	if s := agentScript(q); !strings.Contains(s, `*/*) agent="$HOME/$agent"`) {
		t.Errorf("a path under home is not made absolute:\n%s", s)
	}
}

func TestAJobHandedAfterThePollIsNotTakenForGone(t *testing.T) {
	p := &poll{Known: true, States: map[string]string{"a": "running", "b": "finished"}, Asked: map[string]bool{"a": true, "b": true, "c": true}}
	for job, want := range map[string]string{"a": "", "b": "finished", "c": "unknown to Buildkite", "new": ""} {
		if got := result(p, job); got != want {
			t.Errorf("result(%s) = %q, want %q", job, got, want)
		}
	}
	p.Known = false
	if got := result(p, "b"); got != "" {
		t.Errorf("a failed poll ended job b: %q", got)
	}
}

func TestJobsWaitWithoutABreak(t *testing.T) {
	jobs := []stacksapi.ScheduledJob{{ID: "a"}, {ID: "b"}}
	if n := waiting(jobs, map[string]bool{"a": true}); n != 1 {
		t.Errorf("waiting %d, want 1 (a is held by an agent)", n)
	}
	t1 := t0.Add(time.Minute)
	if got := waitingSince(time.Time{}, 1, t0); !got.Equal(t0) {
		t.Errorf("a wait starts now: %s", got)
	}
	if got := waitingSince(t0, 2, t1); !got.Equal(t0) {
		t.Errorf("a wait goes on from its start: %s", got)
	}
	if got := waitingSince(t0, 0, t1); !got.IsZero() {
		t.Errorf("no job waits, yet since %s", got)
	}
}

func TestAJobIsNamedByWhatBuildkiteSaid(t *testing.T) {
	var j stacksapi.ScheduledJob
	if got := displayName(j); got != "" {
		t.Errorf("nothing said, named %q", got)
	}
	j.Pipeline.Slug, j.Build.Number, j.Step.Key = "app", 12, "test"
	if got := displayName(j); got != "app #12 test" {
		t.Errorf("named %q, want app #12 test", got)
	}
}
