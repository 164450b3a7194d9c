package buildkite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildkite/stacksapi"

	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
)

const agentToken = "bkct_test"

// clock is a settable time for the fake.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func setup(t *testing.T) (*fakebuildkite.Server, *buildkite.Client, *clock) {
	t.Helper()
	bk := fakebuildkite.New(agentToken, "macos")
	t.Cleanup(bk.Close)
	clk := &clock{t: time.Now()}
	bk.SetClock(clk.now)
	c, err := buildkite.New(bk.URL(), agentToken, "macvirt-ci-ios", "macos", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(context.Background(), map[string]string{"namespace": "ci"}); err != nil {
		t.Fatal(err)
	}
	return bk, c, clk
}

// agent runs the fake buildkite-agent with env.
func agent(t *testing.T, env map[string]string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := fakebuildkite.AgentMain(context.Background(), []string{"start"}, func(k string) string { return env[k] }, &out, &errs)
	return code, out.String() + errs.String()
}

func TestAJobTravelsFromTheQueueToOneAgentWithItsOwnToken(t *testing.T) {
	ctx := context.Background()
	bk, c, _ := setup(t)
	a, b := bk.AddJob("echo built a"), bk.AddJob("exit 3")
	q, err := c.Scheduled(ctx, 10)
	if err != nil || len(q.Jobs) != 2 || q.Paused {
		t.Fatalf("scheduled %d (paused %t, %v), want 2", len(q.Jobs), q.Paused, err)
	}
	reserved, err := c.Reserve(ctx, []string{a, b}, 10*time.Minute)
	if err != nil || len(reserved) != 2 {
		t.Fatalf("reserved %v (%v)", reserved, err)
	}
	// Another stack sees neither, and cannot reserve them.
	other, err := buildkite.New(bk.URL(), agentToken, "other", "macos", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Register(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, stack := range []*buildkite.Client{c, other} {
		if q, err := stack.Scheduled(ctx, 10); err != nil || len(q.Jobs) != 0 {
			t.Errorf("stack %s lists %d reserved jobs (%v); Buildkite lists only jobs no stack holds", stack.Stack, len(q.Jobs), err)
		}
	}
	if got, err := other.Reserve(ctx, []string{a}, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("another stack reserved %v (%v)", got, err)
	}
	if _, err := other.Issue(ctx, a, time.Minute); !errors.Is(err, buildkite.ErrNotIssued) {
		t.Errorf("another stack was issued a token for a job it does not hold: %v", err)
	}

	tokA, err := c.Issue(ctx, a, 15*time.Minute)
	if err != nil || !strings.HasPrefix(tokA.Value, "bkjat_") {
		t.Fatalf("token %+v (%v)", tokA, err)
	}
	tokB, err := c.Issue(ctx, b, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// B's token does not take A.
	if code, out := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": tokB.Value, "BUILDKITE_AGENT_ACQUIRE_JOB": a,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL(), "BUILDKITE_AGENT_NAME": "mac-b"}); code != 1 || !strings.Contains(out, "another job") {
		t.Errorf("B's token acquired A: exit %d\n%s", code, out)
	}
	code, out := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": tokA.Value, "BUILDKITE_AGENT_ACQUIRE_JOB": a,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL(), "BUILDKITE_AGENT_NAME": "mac-a"})
	if code != 0 {
		t.Fatalf("agent exit %d\n%s", code, out)
	}
	job, _ := bk.Job(a)
	if job.State != fakebuildkite.StateFinished || job.ExitStatus != 0 || job.Agent != "mac-a" || !strings.Contains(job.Output, "built a") {
		t.Errorf("job A: %+v", job)
	}
	// A token registers once; a job is acquired once.
	if code, _ := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": tokA.Value, "BUILDKITE_AGENT_ACQUIRE_JOB": a,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL()}); code != 1 {
		t.Errorf("a used token registered again: exit %d", code)
	}
	if code, _ := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": agentToken, "BUILDKITE_AGENT_ACQUIRE_JOB": a,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL()}); code != fakebuildkite.ExitJobUnavailable {
		t.Errorf("a finished job acquired again: exit %d, want %d", code, fakebuildkite.ExitJobUnavailable)
	}
	// B's first token was spent registering the agent that tried A.
	if tokB, err = c.Issue(ctx, b, 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The job's own failure is the job's, not the agent's.
	if code, out := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": tokB.Value, "BUILDKITE_AGENT_ACQUIRE_JOB": b,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL()}); code != 0 {
		t.Errorf("agent of a failing job exit %d\n%s", code, out)
	}
	states, err := c.States(ctx, []string{a, b, "unknown"})
	if err != nil || states[a] != "finished" || states[b] != "finished" || len(states) != 2 {
		t.Errorf("states %v (%v)", states, err)
	}
	if job, _ := bk.Job(b); job.ExitStatus != 3 || job.Acquisitions != 1 {
		t.Errorf("job B: %+v", job)
	}
}

func TestReservationsAndTokensExpire(t *testing.T) {
	ctx := context.Background()
	bk, c, clk := setup(t)
	a := bk.AddJob("true")
	if _, err := c.Reserve(ctx, []string{a}, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Issue(ctx, a, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tok.Expires); d > 6*time.Minute {
		t.Errorf("the token outlives its reservation by %s", d-5*time.Minute)
	}
	if _, err := c.Issue(ctx, a, 2*time.Hour); err == nil || !strings.Contains(err.Error(), "3600") {
		t.Errorf("a two-hour token was issued: %v", err)
	}
	clk.add(6 * time.Minute)
	if code, out := agent(t, map[string]string{"BUILDKITE_AGENT_TOKEN": tok.Value, "BUILDKITE_AGENT_ACQUIRE_JOB": a,
		"BUILDKITE_AGENT_ENDPOINT": bk.URL()}); code != 1 || !strings.Contains(out, "expired") {
		t.Errorf("an expired token registered: exit %d\n%s", code, out)
	}
	if job, _ := bk.Job(a); job.State != fakebuildkite.StateScheduled || job.ReservedBy != "" {
		t.Errorf("an expired reservation holds the job: %+v", job)
	}
	if _, err := c.Issue(ctx, a, time.Minute); !errors.Is(err, buildkite.ErrNotIssued) {
		t.Errorf("a token was issued after the reservation ended: %v", err)
	}
}

func TestAPausedQueueSaysSo(t *testing.T) {
	bk, c, _ := setup(t)
	bk.AddJob("true")
	bk.SetPaused(true)
	if q, err := c.Scheduled(context.Background(), 10); err != nil || !q.Paused {
		t.Errorf("a paused queue: %+v %v", q, err)
	}
}

func TestAJobThatCannotStartIsFailedWithAReason(t *testing.T) {
	ctx := context.Background()
	bk, c, _ := setup(t)
	a := bk.AddJob("true")
	if _, err := c.Reserve(ctx, []string{a}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(ctx, a, "its Mac was lost"); err != nil {
		t.Fatal(err)
	}
	if job, _ := bk.Job(a); job.State != fakebuildkite.StateFinished || job.ExitStatus != -1 || job.Detail != "its Mac was lost" {
		t.Errorf("job: %+v", job)
	}
}

func TestBuildkitesRefusalsAreExplained(t *testing.T) {
	bk := fakebuildkite.New(agentToken, "macos")
	defer bk.Close()
	c, err := buildkite.New(bk.URL(), "wrong", "s", "macos", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Register(context.Background(), nil)
	e := buildkite.Explain(err, "Secret ci/bk (key token)")
	if err == nil || !e.Credentials || e.StatusCode != 401 || !strings.Contains(e.Message, "Secret ci/bk") {
		t.Errorf("a refused token: %v -> %+v", err, e)
	}
	c, _ = buildkite.New(bk.URL(), agentToken, "s", "linux", nil)
	if e := buildkite.Explain(c.Register(context.Background(), nil), "x"); e.Credentials || e.StatusCode != 404 || !strings.Contains(e.Message, "linux") {
		t.Errorf("an unknown queue: %+v", e)
	}
	if _, err := buildkite.New("ftp://x", agentToken, "s", "q", nil); err == nil {
		t.Error("an ftp endpoint was taken")
	}
}

func TestARateLimitSaysWhenItResets(t *testing.T) {
	cases := map[string]struct {
		code   int
		header http.Header
		want   time.Duration
	}{
		"RateLimit-Reset, as Buildkite's APIs say it": {code: 429, header: http.Header{"Ratelimit-Reset": {"42"}}, want: 42 * time.Second},
		"Retry-After when that is all it says":        {code: 429, header: http.Header{"Retry-After": {"7"}}, want: 7 * time.Second},
		"RateLimit-Reset first":                       {code: 429, header: http.Header{"Ratelimit-Reset": {"42"}, "Retry-After": {"7"}}, want: 42 * time.Second},
		"a rate limit that says nothing":              {code: 429, header: http.Header{"Retry-After": {"Wed, 21 Oct 2026 07:28:00 GMT"}}},
		"no rate limit, no reset":                     {code: 503, header: http.Header{"Retry-After": {"7"}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://agent.buildkite.com/v3/stacks/s/scheduled_jobs", nil)
			err := &stacksapi.ErrorResponse{Response: &http.Response{StatusCode: tc.code, Header: tc.header, Request: req}, Message: "slow down"}
			e := buildkite.Explain(fmt.Errorf("listing scheduled jobs: %w", err), "x")
			if e.StatusCode != tc.code || e.RateLimitReset != tc.want {
				t.Errorf("%+v, want status %d and a reset in %s", e, tc.code, tc.want)
			}
		})
	}
}
