package fakegithub_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"
	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v90/github"

	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

const (
	appID          = 4242
	installationID = 77
	pat            = "github_pat_test"
)

// newKey makes an RSA key and its PEM (PKCS #1) form.
func newKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastRetries keeps the scale-set client's retries short.
var fastRetries = []scaleset.HTTPOption{scaleset.WithRetryMax(2), scaleset.WithRetryWaitMax(50 * time.Millisecond)}

func patClient(t *testing.T, srv *fakegithub.Server, path, token string, opts ...scaleset.HTTPOption) *scaleset.Client {
	t.Helper()
	c, err := scaleset.NewClientWithPersonalAccessToken(scaleset.NewClientWithPersonalAccessTokenConfig{
		GitHubConfigURL:     srv.URL() + "/" + path,
		PersonalAccessToken: token,
	}, append(append([]scaleset.HTTPOption{}, fastRetries...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createScaleSet(ctx context.Context, t *testing.T, c *scaleset.Client, name string, labels ...string) *scaleset.RunnerScaleSet {
	t.Helper()
	ss := &scaleset.RunnerScaleSet{Name: name, RunnerGroupID: 1}
	for _, l := range labels {
		ss.Labels = append(ss.Labels, scaleset.Label{Name: l})
	}
	created, err := c.CreateRunnerScaleSet(ctx, ss)
	if err != nil {
		t.Fatalf("creating scale set %s: %v", name, err)
	}
	return created
}

// nextMessage polls the session until a message arrives.
func nextMessage(ctx context.Context, t *testing.T, s *scaleset.MessageSessionClient, lastID, capacity int) *scaleset.RunnerScaleSetMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		m, err := s.GetMessage(ctx, lastID, capacity)
		if err != nil {
			t.Fatalf("getting a message: %v", err)
		}
		if m != nil {
			return m
		}
	}
	t.Fatal("no message within 10s")
	return nil
}

func jobState(srv *fakegithub.Server, id string) fakegithub.JobView {
	j, _ := srv.Job(id)
	return j
}

// testScaler starts a fake runner per desired runner, as an operator would
// start a Mac per runner.
type testScaler struct {
	t      *testing.T
	client *scaleset.Client
	setID  int
	max    int
	ctx    context.Context

	mu      sync.Mutex
	active  map[string]bool
	started int
	outputs map[string]*bytes.Buffer
	errs    map[string]error
	wg      sync.WaitGroup
}

func (s *testScaler) HandleDesiredRunnerCount(ctx context.Context, count int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.active) < min(count, s.max) {
		s.started++
		name := fmt.Sprintf("mac-%d", s.started)
		jit, err := s.client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, s.setID)
		if err != nil {
			return 0, err
		}
		if jit.Runner == nil || jit.Runner.Name != name || jit.Runner.RunnerScaleSetID != s.setID || jit.Runner.ID == 0 {
			s.t.Errorf("JIT config's runner is %+v", jit.Runner)
		}
		s.active[name] = true
		out := &bytes.Buffer{}
		s.outputs[name] = out
		s.wg.Go(func() {
			err := fakegithub.RunRunner(s.ctx, jit.EncodedJITConfig, out)
			s.mu.Lock()
			s.errs[name] = err
			s.mu.Unlock()
		})
	}
	return len(s.active), nil
}

func (s *testScaler) HandleJobStarted(_ context.Context, m *scaleset.JobStarted) error {
	if m.RunnerName == "" || m.RunnerID == 0 {
		s.t.Errorf("JobStarted without a runner: %+v", m)
	}
	return nil
}

func (s *testScaler) HandleJobCompleted(_ context.Context, m *scaleset.JobCompleted) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, m.RunnerName)
	return nil
}

func TestListenerRunsEachJobOnItsOwnEphemeralRunner(t *testing.T) {
	key, keyPEM := newKey(t)
	srv := fakegithub.New(fakegithub.Options{
		Apps:     []fakegithub.App{{AppID: appID, InstallationID: installationID, PublicKey: &key.PublicKey}},
		Orgs:     []string{"acme"},
		PollWait: 300 * time.Millisecond,
	})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	client, err := scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
		GitHubConfigURL: srv.URL() + "/acme",
		GitHubAppAuth:   scaleset.GitHubAppAuth{ClientID: strconv.Itoa(appID), InstallationID: installationID, PrivateKey: string(keyPEM)},
	}, fastRetries...)
	if err != nil {
		t.Fatal(err)
	}
	group, err := client.GetRunnerGroupByName(ctx, scaleset.DefaultRunnerGroup)
	if err != nil {
		t.Fatal(err)
	}
	if group.ID != 1 || !group.IsDefault {
		t.Fatalf("default group is %+v", group)
	}
	if ss, err := client.GetRunnerScaleSet(ctx, group.ID, "mac"); err != nil || ss != nil {
		t.Fatalf("before creation: %+v, %v", ss, err)
	}
	ss := createScaleSet(ctx, t, client, "mac", "mac", "macos-15")
	got, err := client.GetRunnerScaleSet(ctx, group.ID, "mac")
	if err != nil || got == nil || got.ID != ss.ID || got.RunnerGroupName != "default" {
		t.Fatalf("by name: %+v, %v", got, err)
	}
	if byID, err := client.GetRunnerScaleSetByID(ctx, ss.ID); err != nil || byID.Name != "mac" {
		t.Fatalf("by id: %+v, %v", byID, err)
	}

	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()

	runnerCtx, stopRunners := context.WithCancel(ctx)
	defer stopRunners()
	scaler := &testScaler{
		t: t, client: client, setID: ss.ID, max: 5, ctx: runnerCtx,
		active: map[string]bool{}, outputs: map[string]*bytes.Buffer{}, errs: map[string]error{},
	}
	l, err := listener.New(session, listener.Config{ScaleSetID: ss.ID, MaxRunners: 5})
	if err != nil {
		t.Fatal(err)
	}
	listenCtx, stopListener := context.WithCancel(ctx)
	listenDone := make(chan error, 1)
	go func() { listenDone <- l.Run(listenCtx, scaler) }()

	var ids []string
	for i := range 5 {
		ids = append(ids, srv.QueueJob(fakegithub.Job{
			Owner: "acme", Repo: "app", Labels: []string{"macos-15"},
			DisplayName: fmt.Sprintf("build-%d", i), Duration: 300 * time.Millisecond,
		}))
	}
	eventually(t, 20*time.Second, "all five jobs completed", func() bool {
		for _, id := range ids {
			if jobState(srv, id).State != fakegithub.JobCompleted {
				return false
			}
		}
		return true
	})
	runnersUsed := map[string]bool{}
	for _, id := range ids {
		j := jobState(srv, id)
		if j.Result != fakegithub.ResultSucceeded {
			t.Errorf("job %s ended %q", j.DisplayName, j.Result)
		}
		if j.RunnerName == "" || runnersUsed[j.RunnerName] {
			t.Errorf("job %s ran on %q, which is empty or ran another job", j.DisplayName, j.RunnerName)
		}
		runnersUsed[j.RunnerName] = true
		if j.ScaleSetID != ss.ID || j.Attempts != 1 || j.ScaleSetAssignTime.IsZero() || j.RunnerAssignTime.Before(j.ScaleSetAssignTime) || j.FinishTime.Before(j.RunnerAssignTime) {
			t.Errorf("job view %+v", j)
		}
	}
	for name, n := range srv.RunnerJobCounts() {
		if n > 1 {
			t.Errorf("runner %s ran %d jobs", name, n)
		}
	}
	eventually(t, 10*time.Second, "the scale set's statistics are back to zero", func() bool {
		st := srv.ScaleSets()[0].Statistics
		return st.TotalAvailableJobs == 0 && st.TotalAcquiredJobs == 0 && st.TotalAssignedJobs == 0 && st.TotalRunningJobs == 0 && st.TotalBusyRunners == 0
	})
	for _, r := range srv.Runners() {
		if runnersUsed[r.Name] {
			t.Errorf("runner %s ran its job but is still registered", r.Name)
		}
	}
	if c := srv.MaxCapacity(ss.ID); c != 5 {
		t.Errorf("max capacity %d, want 5", c)
	}
	if got := len(srv.Sessions()); got != 1 {
		t.Errorf("%d sessions, want 1", got)
	}

	eventually(t, 10*time.Second, "the runners that ran a job returned", func() bool {
		scaler.mu.Lock()
		defer scaler.mu.Unlock()
		for name := range runnersUsed {
			if _, ok := scaler.errs[name]; !ok {
				return false
			}
		}
		return true
	})
	stopListener()
	if err := <-listenDone; !errors.Is(err, context.Canceled) {
		t.Errorf("listener ended with %v", err)
	}
	stopRunners()
	scaler.wg.Wait()
	if scaler.started != 5 {
		t.Errorf("the scaler started %d runners, want 5", scaler.started)
	}
	for name := range runnersUsed {
		if err := scaler.errs[name]; err != nil {
			t.Errorf("runner %s: %v", name, err)
		}
		out := scaler.outputs[name].String()
		if !strings.Contains(out, "Listening for Jobs") || !strings.Contains(out, "Running job: build-") || !strings.Contains(out, "completed with result: Succeeded") {
			t.Errorf("runner %s printed %q", name, out)
		}
	}
	reqs := srv.Requests()
	for _, ep := range []string{fakegithub.EndpointAccessToken, fakegithub.EndpointOrgRegistrationToken, fakegithub.EndpointRunnerRegistration,
		fakegithub.EndpointCreateSession, fakegithub.EndpointGetMessage, fakegithub.EndpointDeleteMessage, fakegithub.EndpointAcquireJobs,
		fakegithub.EndpointGenerateJITConfig, fakegithub.EndpointRunnerListen} {
		if reqs[ep] == 0 {
			t.Errorf("%s was never called", ep)
		}
	}
	if reqs[fakegithub.EndpointUnknown] != 0 {
		t.Errorf("%d requests matched no route", reqs[fakegithub.EndpointUnknown])
	}
}

func TestSessionConflictAndExpiry(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{Tokens: []string{pat}, SessionTTL: 500 * time.Millisecond, PollWait: 100 * time.Millisecond})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if _, err := patClient(t, srv, "acme/app", "wrong").GetRunnerGroupByName(ctx, "default"); err == nil || !strings.Contains(err.Error(), "Bad credentials") {
		t.Errorf("a wrong token: %v", err)
	}
	client := patClient(t, srv, "acme/app", pat)
	ss := createScaleSet(ctx, t, client, "linux")
	first, err := client.MessageSessionClient(ctx, ss.ID, "one")
	if err != nil {
		t.Fatal(err)
	}
	if s := first.Session(); s.Statistics == nil || s.RunnerScaleSet == nil || s.RunnerScaleSet.ID != ss.ID || s.MessageQueueAccessToken == "" ||
		!strings.HasPrefix(s.MessageQueueURL, srv.URL()+"/_queue/"+s.SessionID.String()) {
		t.Errorf("session %+v", s)
	}
	_, err = client.MessageSessionClient(ctx, ss.ID, "two")
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "SessionConflictException") {
		t.Fatalf("a second session while the first is open: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := client.MessageSessionClient(ctx, ss.ID, "two")
	if err != nil {
		t.Fatalf("a session after the first closed: %v", err)
	}
	// Polling keeps the session alive past its TTL.
	for range 8 {
		if _, err := second.GetMessage(ctx, 0, 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.MessageSessionClient(ctx, ss.ID, "three"); err == nil {
		t.Fatal("a polled session expired")
	}
	// A session nobody polls expires.
	eventually(t, 5*time.Second, "the unpolled session expired", func() bool {
		_, err := client.MessageSessionClient(ctx, ss.ID, "three")
		return err == nil
	})
	if _, err := second.GetMessage(ctx, 0, 3); err == nil {
		t.Error("the expired session still gets messages")
	}
	if srv.MaxCapacity(ss.ID) != 3 {
		t.Errorf("max capacity %d, want 3", srv.MaxCapacity(ss.ID))
	}
}

func TestCancelReassignRedeliverAndCapacity(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{PollWait: 100 * time.Millisecond})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := patClient(t, srv, "acme", "any-token")
	ss := createScaleSet(ctx, t, client, "mac", "mac", "arm64")
	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	job := fakegithub.Job{Owner: "acme", Repo: "app", Labels: []string{"mac", "arm64"}, Duration: time.Hour}

	// Offered, then cancelled before it started.
	id1 := srv.QueueJob(job)
	m := nextMessage(ctx, t, session, 0, 10)
	if len(m.JobAvailableMessages) != 1 || m.JobAvailableMessages[0].JobID != id1 || m.Statistics.TotalAvailableJobs != 1 ||
		!strings.Contains(m.JobAvailableMessages[0].AcquireJobURL, "/acquirejobs") || m.JobAvailableMessages[0].OwnerName != "acme" {
		t.Fatalf("first message %+v", m)
	}
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	if err := srv.CancelJob(id1); err != nil {
		t.Fatal(err)
	}
	m = nextMessage(ctx, t, session, m.MessageID, 10)
	if len(m.JobCompletedMessages) != 1 || m.JobCompletedMessages[0].Result != "canceled" || m.JobCompletedMessages[0].JobID != id1 || m.Statistics.TotalAvailableJobs != 0 {
		t.Fatalf("after cancel: %+v", m)
	}
	if j := jobState(srv, id1); j.State != fakegithub.JobCompleted || j.Result != fakegithub.ResultCanceled {
		t.Errorf("cancelled job %+v", j)
	}
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	last := m.MessageID

	// Acquired, then taken back and offered again.
	id2 := srv.QueueJob(job)
	m = nextMessage(ctx, t, session, last, 10)
	r1 := m.JobAvailableMessages[0].RunnerRequestID
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	acquired, err := session.AcquireJobs(ctx, []int64{r1, 999})
	if err != nil || len(acquired) != 1 || acquired[0] != r1 {
		t.Fatalf("acquired %v, %v", acquired, err)
	}
	m = nextMessage(ctx, t, session, m.MessageID, 10)
	if len(m.JobAssignedMessages) != 1 || m.JobAssignedMessages[0].JobID != id2 || m.Statistics.TotalAssignedJobs != 1 || m.Statistics.TotalAcquiredJobs != 1 {
		t.Fatalf("after acquiring: %+v %+v", m, m.Statistics)
	}
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reassign(id2); err != nil {
		t.Fatal(err)
	}
	m = nextMessage(ctx, t, session, m.MessageID, 10)
	if len(m.JobCompletedMessages) != 1 || m.JobCompletedMessages[0].RunnerRequestID != r1 || m.JobCompletedMessages[0].Result != "canceled" ||
		len(m.JobAvailableMessages) != 1 || m.JobAvailableMessages[0].JobID != id2 || m.JobAvailableMessages[0].RunnerRequestID == r1 {
		t.Fatalf("after reassigning: %+v", m)
	}
	if j := jobState(srv, id2); j.Attempts != 2 || j.State != fakegithub.JobAvailable {
		t.Errorf("reassigned job %+v", j)
	}
	r2 := m.JobAvailableMessages[0].RunnerRequestID

	// A message not deleted is delivered again, to a poll from the start.
	again := nextMessage(ctx, t, session, 0, 10)
	if again.MessageID != m.MessageID || len(again.JobAvailableMessages) != 1 {
		t.Fatalf("redelivered %+v, want message %d", again, m.MessageID)
	}
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	if none, err := session.GetMessage(ctx, 0, 10); err != nil || none != nil {
		t.Fatalf("after deleting everything: %+v, %v", none, err)
	}
	last = m.MessageID

	// Runners: by id and name, a name taken, a busy runner, a cancelled job.
	if _, err := session.AcquireJobs(ctx, []int64{r2}); err != nil {
		t.Fatal(err)
	}
	jit, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "mac-a"}, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "mac-a"}, ss.ID); !errors.Is(err, scaleset.RunnerExistsError) {
		t.Errorf("a taken name: %v", err)
	}
	if r, err := client.GetRunnerByName(ctx, "mac-a"); err != nil || r == nil || r.ID != jit.Runner.ID {
		t.Errorf("by name: %+v, %v", r, err)
	}
	if r, err := client.GetRunner(ctx, jit.Runner.ID); err != nil || r.Name != "mac-a" || r.RunnerScaleSetID != ss.ID {
		t.Errorf("by id: %+v, %v", r, err)
	}
	if _, err := client.GetRunner(ctx, 999); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown runner: %v", err)
	}
	if err := client.RemoveRunner(ctx, 999); !errors.Is(err, scaleset.RunnerNotFoundError) {
		t.Errorf("removing an unknown runner: %v", err)
	}
	out := &bytes.Buffer{}
	done := make(chan error, 1)
	go func() { done <- fakegithub.RunRunner(ctx, jit.EncodedJITConfig, out) }()
	eventually(t, 5*time.Second, "the job is running", func() bool { return jobState(srv, id2).State == fakegithub.JobRunning })
	if err := client.RemoveRunner(ctx, int64(jit.Runner.ID)); !errors.Is(err, scaleset.JobStillRunningError) {
		t.Errorf("removing a busy runner: %v", err)
	}
	if err := srv.CancelJob(id2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("runner of a cancelled job: %v", err)
	}
	if !strings.Contains(out.String(), "completed with result: Canceled") {
		t.Errorf("runner printed %q", out.String())
	}
	if j := jobState(srv, id2); j.Result != fakegithub.ResultCanceled || j.RunnerName != "mac-a" {
		t.Errorf("job %+v", j)
	}
	m = nextMessage(ctx, t, session, last, 10)
	var started, completed int
	for {
		started += len(m.JobStartedMessages)
		for _, c := range m.JobCompletedMessages {
			if c.RunnerName == "mac-a" && c.Result == "canceled" {
				completed++
			}
		}
		if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
			t.Fatal(err)
		}
		if started == 1 && completed == 1 {
			break
		}
		m = nextMessage(ctx, t, session, m.MessageID, 10)
	}
	if len(srv.Runners()) != 0 {
		t.Errorf("runners left: %+v", srv.Runners())
	}

	// Capacity: a listener that can take one job is offered one at a time.
	if m, err := session.GetMessage(ctx, 0, 1); err != nil || m != nil {
		t.Fatalf("idle poll: %+v, %v", m, err)
	}
	id3, id4 := srv.QueueJob(job), srv.QueueJob(job)
	m = nextMessage(ctx, t, session, 0, 1)
	if len(m.JobAvailableMessages) != 1 || m.JobAvailableMessages[0].JobID != id3 || jobState(srv, id4).State != fakegithub.JobQueued {
		t.Fatalf("with capacity 1: %+v; second job %+v", m, jobState(srv, id4))
	}
	if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
		t.Fatal(err)
	}
	if err := srv.CancelJob(id3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the second job is offered", func() bool { return jobState(srv, id4).State == fakegithub.JobAvailable })

	// A job no scale set matches waits in the queue.
	id5 := srv.QueueJob(fakegithub.Job{Owner: "other", Repo: "app", Labels: []string{"mac"}})
	if j := jobState(srv, id5); j.State != fakegithub.JobQueued {
		t.Errorf("a job of another organisation: %+v", j)
	}
	if err := srv.Reassign(id5); err == nil {
		t.Error("reassigned a queued job")
	}
}

func TestLostAndRemovedRunners(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{PollWait: 100 * time.Millisecond, LostRunnerGrace: 300 * time.Millisecond})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := patClient(t, srv, "acme", "any-token")
	ss := createScaleSet(ctx, t, client, "mac")
	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	id := srv.QueueJob(fakegithub.Job{Owner: "acme", Repo: "app", Labels: []string{"mac"}, Duration: time.Hour})
	m := nextMessage(ctx, t, session, 0, 10)
	if _, err := session.AcquireJobs(ctx, []int64{m.JobAvailableMessages[0].RunnerRequestID}); err != nil {
		t.Fatal(err)
	}
	jit := func(name string) *scaleset.RunnerScaleSetJitRunnerConfig {
		c, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, ss.ID)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// A runner killed while it runs a job: the job fails after the grace.
	lost := jit("lost")
	runCtx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fakegithub.RunRunner(runCtx, lost.EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "the job is running", func() bool { return jobState(srv, id).State == fakegithub.JobRunning })
	kill()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("killed runner returned %v", err)
	}
	eventually(t, 5*time.Second, "the job failed", func() bool { return jobState(srv, id).State == fakegithub.JobCompleted })
	if j := jobState(srv, id); j.Result != fakegithub.ResultFailed || j.RunnerName != "lost" {
		t.Errorf("job %+v", j)
	}
	if len(srv.Runners()) != 0 {
		t.Errorf("the lost runner is still registered: %+v", srv.Runners())
	}

	// A runner removed while it waits for a job.
	idle := jit("idle")
	go func() { done <- fakegithub.RunRunner(ctx, idle.EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "the idle runner is online", func() bool {
		rs := srv.Runners()
		return len(rs) == 1 && rs[0].Online && !rs[0].Busy
	})
	if st := srv.ScaleSets()[0].Statistics; st.TotalRegisteredRunners != 1 || st.TotalIdleRunners != 1 {
		t.Errorf("statistics %+v", st)
	}
	if err := client.RemoveRunner(ctx, int64(idle.Runner.ID)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("removed runner returned %v", err)
	}

	// A runner removed before it started.
	early := jit("early")
	if err := client.RemoveRunner(ctx, int64(early.Runner.ID)); err != nil {
		t.Fatal(err)
	}
	if err := fakegithub.RunRunner(ctx, early.EncodedJITConfig, io.Discard); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("runner removed before starting returned %v", err)
	}

	// A runner still connected when the server closes returns an error.
	last := jit("last")
	go func() { done <- fakegithub.RunRunner(ctx, last.EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "the last runner is online", func() bool {
		rs := srv.Runners()
		return len(rs) == 1 && rs[0].Online
	})
	srv.Close()
	if err := <-done; err == nil {
		t.Error("the runner returned nil when the server closed")
	}
	if counts := srv.RunnerJobCounts(); counts["lost"] != 1 || counts["idle"] != 0 || len(counts) != 4 {
		t.Errorf("runner job counts %v", counts)
	}
}

func TestRESTThroughAnInstallationTransport(t *testing.T) {
	key, keyPEM := newKey(t)
	srv := fakegithub.New(fakegithub.Options{
		Apps:     []fakegithub.App{{AppID: appID, InstallationID: installationID, PublicKey: &key.PublicKey}},
		Orgs:     []string{"acme"},
		PollWait: 100 * time.Millisecond,
	})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
		GitHubConfigURL: srv.URL() + "/acme",
		GitHubAppAuth:   scaleset.GitHubAppAuth{ClientID: strconv.Itoa(appID), InstallationID: installationID, PrivateKey: string(keyPEM)},
	}, fastRetries...)
	if err != nil {
		t.Fatal(err)
	}
	ss := createScaleSet(ctx, t, client, "mac", "mac", "macos-15")
	var jits []*scaleset.RunnerScaleSetJitRunnerConfig
	for _, name := range []string{"mac-1", "mac-2", "mac-3"} {
		j, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, ss.ID)
		if err != nil {
			t.Fatal(err)
		}
		jits = append(jits, j)
	}

	gh := func(key []byte, inst int64) *github.Client {
		tr, err := ghinstallation.New(http.DefaultTransport, appID, inst, key)
		if err != nil {
			t.Fatal(err)
		}
		tr.BaseURL = srv.URL() + "/api/v3"
		c, err := github.NewClient(github.WithTransport(tr), github.WithEnterpriseURLs(srv.URL()+"/api/v3/", srv.URL()+"/api/uploads/"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := gh(keyPEM, installationID)
	page1, resp, err := c.Actions.ListOrganizationRunners(ctx, "acme", &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if page1.TotalCount != 3 || len(page1.Runners) != 2 || resp.NextPage != 2 || resp.LastPage != 2 {
		t.Fatalf("page 1: total %d, %d runners, next %d, last %d", page1.TotalCount, len(page1.Runners), resp.NextPage, resp.LastPage)
	}
	r := page1.Runners[0]
	if r.GetName() != "mac-1" || r.GetOS() != "macOS" || r.GetStatus() != "offline" || r.GetBusy() || len(r.Labels) == 0 || r.Labels[0].GetName() != "mac" {
		t.Errorf("runner %s", github.Stringify(r))
	}
	page2, resp, err := c.Actions.ListOrganizationRunners(ctx, "acme", &github.ListRunnersOptions{ListOptions: github.ListOptions{PerPage: 2, Page: 2}})
	if err != nil || len(page2.Runners) != 1 || resp.NextPage != 0 || resp.PrevPage != 1 || page2.Runners[0].GetName() != "mac-3" {
		t.Fatalf("page 2: %s, next %d, %v", github.Stringify(page2), resp.NextPage, err)
	}
	if _, err := c.Actions.RemoveOrganizationRunner(ctx, "acme", int64(jits[0].Runner.ID)); err != nil {
		t.Fatal(err)
	}
	var ghErr *github.ErrorResponse
	if _, err := c.Actions.RemoveOrganizationRunner(ctx, "acme", int64(jits[0].Runner.ID)); !errors.As(err, &ghErr) || ghErr.Response.StatusCode != http.StatusNotFound {
		t.Errorf("removing a removed runner: %v", err)
	}
	if _, _, err := c.Actions.ListOrganizationRunners(ctx, "elsewhere", nil); !errors.As(err, &ghErr) || ghErr.Response.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown organisation: %v", err)
	}

	// A busy runner cannot be removed.
	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()
	id := srv.QueueJob(fakegithub.Job{Owner: "acme", Repo: "app", Labels: []string{"macos-15"}, Duration: time.Hour})
	m := nextMessage(ctx, t, session, 0, 10)
	if _, err := session.AcquireJobs(ctx, []int64{m.JobAvailableMessages[0].RunnerRequestID}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fakegithub.RunRunner(ctx, jits[1].EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "the job is running", func() bool { return jobState(srv, id).State == fakegithub.JobRunning })
	busy, _, err := c.Actions.ListOrganizationRunners(ctx, "acme", &github.ListRunnersOptions{Name: github.Ptr("mac-2")})
	if err != nil || busy.TotalCount != 1 || !busy.Runners[0].GetBusy() || busy.Runners[0].GetStatus() != "online" {
		t.Errorf("busy runner: %s, %v", github.Stringify(busy), err)
	}
	if _, err := c.Actions.RemoveOrganizationRunner(ctx, "acme", int64(jits[1].Runner.ID)); !errors.As(err, &ghErr) ||
		ghErr.Response.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(ghErr.Message, "still running a job") {
		t.Errorf("removing a busy runner: %v", err)
	}
	if err := srv.CancelJob(id); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}

	// A JSON web token signed with another key, or for another installation.
	_, otherPEM := newKey(t)
	_, _, err = gh(otherPEM, installationID).Actions.ListOrganizationRunners(ctx, "acme", nil)
	var hErr *ghinstallation.HTTPError
	if !errors.As(err, &hErr) || hErr.Response == nil || hErr.Response.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %v", err)
	}
	body, _ := io.ReadAll(hErr.Response.Body)
	_ = hErr.Response.Body.Close()
	if !strings.Contains(string(body), "A JSON web token could not be decoded") {
		t.Errorf("a wrong key: body %s", body)
	}
	if _, _, err := gh(keyPEM, installationID+1).Actions.ListOrganizationRunners(ctx, "acme", nil); !errors.As(err, &hErr) || hErr.Response.StatusCode != http.StatusNotFound {
		t.Errorf("another installation: %v", err)
	}
	bad, err := scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
		GitHubConfigURL: srv.URL() + "/acme",
		GitHubAppAuth:   scaleset.GitHubAppAuth{ClientID: strconv.Itoa(appID), InstallationID: installationID, PrivateKey: string(otherPEM)},
	}, fastRetries...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.GetRunnerGroupByName(ctx, "default"); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "JSON web token") {
		t.Errorf("scale-set client with a wrong key: %v", err)
	}
}

func TestFaults(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{Tokens: []string{pat}, PollWait: 100 * time.Millisecond})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := patClient(t, srv, "acme", pat, scaleset.WithRetryMax(0))
	if _, err := client.GetRunnerGroupByName(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	ss := createScaleSet(ctx, t, client, "mac")
	jit, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "mac-1"}, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+pat)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	srv.FailFor(time.Second, http.StatusServiceUnavailable)
	before := srv.Requests()[fakegithub.EndpointRunnerGroups]
	if _, err := client.GetRunnerGroupByName(ctx, "default"); err == nil {
		t.Error("a call succeeded while the server failed")
	}
	if srv.Requests()[fakegithub.EndpointRunnerGroups] != before+1 {
		t.Error("the failed call was not counted")
	}
	resp := get("/api/v3/orgs/acme/actions/runners")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("REST while failing: %s", resp.Status)
	}
	eventually(t, 5*time.Second, "calls succeed again", func() bool {
		_, err := client.GetRunnerGroupByName(ctx, "default")
		return err == nil
	})

	srv.RateLimitFor(2 * time.Second)
	start := time.Now()
	resp = get("/api/v3/orgs/acme/actions/runners")
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var msg struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &msg)
	reset, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-RateLimit-Remaining") != "0" ||
		reset < start.Unix() || reset > start.Add(4*time.Second).Unix() || !strings.HasPrefix(msg.Message, "API rate limit exceeded for ") {
		t.Errorf("rate limited: %s %v %s", resp.Status, resp.Header, body)
	}
	gh, err := github.NewClient(github.WithAuthToken(pat), github.WithEnterpriseURLs(srv.URL()+"/api/v3/", srv.URL()+"/api/uploads/"))
	if err != nil {
		t.Fatal(err)
	}
	var rl *github.RateLimitError
	if _, _, err := gh.Actions.ListOrganizationRunners(ctx, "acme", nil); !errors.As(err, &rl) || rl.Rate.Remaining != 0 || rl.Rate.Reset.Unix() != reset {
		t.Errorf("go-github while rate limited: %v", err)
	}
	// The fake runner's endpoint is not subject to faults.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fakegithub.RunRunner(runCtx, jit.EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "the runner is online while the API is rate limited", func() bool {
		rs := srv.Runners()
		return len(rs) == 1 && rs[0].Online
	})
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the stopped runner returned %v", err)
	}
	eventually(t, 5*time.Second, "the rate limit is over", func() bool {
		resp := get("/api/v3/orgs/acme/actions/runners")
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func TestBatchesRefreshAndScopes(t *testing.T) {
	key, keyPEM := newKey(t)
	srv := fakegithub.New(fakegithub.Options{
		Apps:          []fakegithub.App{{AppID: appID, ClientID: "Iv1.fake", InstallationID: installationID, PublicKey: &key.PublicKey}},
		PollWait:      100 * time.Millisecond,
		QueueTokenTTL: 300 * time.Millisecond,
	})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// GitHub takes the app's client id as the issuer as well as its id.
	client, err := scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
		GitHubConfigURL: srv.URL() + "/acme/app",
		GitHubAppAuth:   scaleset.GitHubAppAuth{ClientID: "Iv1.fake", InstallationID: installationID, PrivateKey: string(keyPEM)},
	}, fastRetries...)
	if err != nil {
		t.Fatal(err)
	}
	ss := createScaleSet(ctx, t, client, "linux")
	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = session.Close(context.Background()) }()

	// A repository's scale set runs that repository's jobs only.
	if j := jobState(srv, srv.QueueJob(fakegithub.Job{Owner: "acme", Repo: "other", Labels: []string{"linux"}})); j.State != fakegithub.JobQueued {
		t.Errorf("another repository's job: %+v", j)
	}
	var ids []string
	for range 120 {
		ids = append(ids, srv.QueueJob(fakegithub.Job{Owner: "ACME", Repo: "App", Labels: []string{"Linux"}}))
	}
	if st := srv.ScaleSets()[0].Statistics; st.TotalAvailableJobs != 120 {
		t.Fatalf("statistics %+v", st)
	}
	// Job messages come fifty at a time, in order.
	var got []string
	last := 0
	for _, want := range []int{50, 50, 20} {
		m := nextMessage(ctx, t, session, last, 200)
		if len(m.JobAvailableMessages) != want {
			t.Fatalf("message %d has %d job messages, want %d", m.MessageID, len(m.JobAvailableMessages), want)
		}
		for _, a := range m.JobAvailableMessages {
			got = append(got, a.JobID)
		}
		if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
			t.Fatal(err)
		}
		last = m.MessageID
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Error("job messages out of order")
	}

	// An expired message queue token is refreshed by the client.
	eventually(t, 10*time.Second, "the session was refreshed", func() bool {
		if _, err := session.GetMessage(ctx, last, 200); err != nil {
			t.Fatalf("polling across a token expiry: %v", err)
		}
		return srv.Requests()[fakegithub.EndpointRefreshSession] > 0
	})
	if n := srv.Requests()[fakegithub.EndpointRepoRegistrationToken]; n == 0 {
		t.Error("the repository's registration token was never asked for")
	}
}

func TestCloseEndsPollsAndRunners(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{PollWait: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := patClient(t, srv, "acme", "any-token", scaleset.WithRetryMax(0))
	ss := createScaleSet(ctx, t, client, "mac")
	session, err := client.MessageSessionClient(ctx, ss.ID, "macvirt")
	if err != nil {
		t.Fatal(err)
	}
	jit, err := client.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "mac-1"}, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		_, _ = session.GetMessage(ctx, 0, 1)
	}()
	ran := make(chan error, 1)
	go func() { ran <- fakegithub.RunRunner(ctx, jit.EncodedJITConfig, io.Discard) }()
	eventually(t, 5*time.Second, "a poll and a runner wait", func() bool {
		ss, rs := srv.Sessions(), srv.Runners()
		return len(ss) == 1 && ss[0].Polling && len(rs) == 1 && rs[0].Online
	})
	start := time.Now()
	srv.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s", d)
	}
	<-polled
	if err := <-ran; err == nil || !strings.Contains(err.Error(), "lost the connection") {
		t.Errorf("runner returned %v", err)
	}
	eventually(t, 5*time.Second, "none of the server's goroutines is left", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "fakegithub.(*Server)") && !strings.Contains(stacks, "fakegithub.RunRunner")
	})
}
