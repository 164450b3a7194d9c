package runnerset

import (
	"context"
	"os"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

// ListenerConfig is what one set's listener runs with; a change restarts
// it.
type ListenerConfig struct {
	Scope        github.Scope
	Credentials  github.Credentials
	ScaleSetName string
	RunnerGroup  string
	Labels       []string
	MaxRunners   int
}

// Listeners keeps one listener per runner set: a goroutine holding the
// scale set's message session, long-polling GitHub for its statistics and
// job messages. It runs under the manager (only on the leader) and closes
// every session when the operator stops.
type Listeners struct {
	// Owner names the sessions this operator opens (its pod's name).
	Owner string
	// Client tunes the GitHub clients.
	Client github.Options
	// Backoff is the first wait after a failure; it doubles up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Events wakes the set's reconcile; the controller watches it.
	Events chan event.GenericEvent

	mu   sync.Mutex
	ctx  context.Context
	stop context.CancelFunc
	// sets are the running listeners, by set. Not a base.Assumed: each
	// owns a goroutine and its GitHub session, which are stopped and
	// closed, not forgotten; and what they learn is GitHub's, which no
	// cache will ever show.
	sets map[types.NamespacedName]*setListener
	// recalled are the message sessions the sets' statuses name, which a
	// listener refused a session closes (see Recall).
	recalled map[types.NamespacedName]string
}

// Recall tells key's listener the message session the set's status names:
// the last one an operator opened for it. Refused a session because
// another is open, the listener closes that one, once, and opens its own
// at once rather than after GitHub's expiry.
func (l *Listeners) Recall(key types.NamespacedName, sessionID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sessionID == "" {
		delete(l.recalled, key)
		return
	}
	l.recalled[key] = sessionID
}

func (l *Listeners) recall(key types.NamespacedName) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.recalled[key]
}

// NewListeners makes the listeners' registry.
func NewListeners(opts github.Options, backoff, maxBackoff time.Duration) *Listeners {
	owner, err := os.Hostname()
	if err != nil || owner == "" {
		owner = "macvirt"
	}
	if backoff <= 0 {
		backoff = 5 * time.Second
	}
	if maxBackoff < backoff {
		maxBackoff = 5 * time.Minute
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Listeners{Owner: owner, Client: opts, Backoff: backoff, MaxBackoff: maxBackoff,
		Events: make(chan event.GenericEvent, 1024), ctx: ctx, stop: stop, sets: map[types.NamespacedName]*setListener{},
		recalled: map[types.NamespacedName]string{}}
}

// Start blocks until ctx ends, then stops every listener, closing its
// session so the next leader can open one at once.
func (l *Listeners) Start(ctx context.Context) error {
	<-ctx.Done()
	l.mu.Lock()
	l.stop()
	sets := make([]*setListener, 0, len(l.sets))
	for _, s := range l.sets {
		sets = append(sets, s)
	}
	l.mu.Unlock()
	for _, s := range sets {
		<-s.done
	}
	return nil
}

// Ensure runs key's listener with cfg, restarting it when cfg changed.
// The old listener is waited for without the registry's lock, which it
// may need on its way out.
func (l *Listeners) Ensure(key types.NamespacedName, cfg ListenerConfig) {
	l.mu.Lock()
	if s, ok := l.sets[key]; ok {
		if reflect.DeepEqual(s.cfg, cfg) {
			l.mu.Unlock()
			return
		}
		delete(l.sets, key)
		l.mu.Unlock()
		s.cancel()
		<-s.done
		l.mu.Lock()
		if _, again := l.sets[key]; again {
			// Another reconcile of the set started one meanwhile.
			l.mu.Unlock()
			l.Ensure(key, cfg)
			return
		}
	}
	defer l.mu.Unlock()
	ctx, cancel := context.WithCancel(l.ctx)
	s := &setListener{key: key, cfg: cfg, cancel: cancel, done: make(chan struct{}),
		started: map[string]macvirtv1alpha1.RunnerJob{}, completed: map[string]string{}}
	l.sets[key] = s
	go s.run(ctx, l)
}

// Stop ends key's listener, closing its session.
func (l *Listeners) Stop(key types.NamespacedName) {
	l.mu.Lock()
	s, ok := l.sets[key]
	delete(l.sets, key)
	l.mu.Unlock()
	if ok {
		s.cancel()
		<-s.done
	}
}

// Demand is what a set's listener learned from GitHub.
type Demand struct {
	// Running: a listener runs for the set.
	Running bool
	// Client talks to GitHub for the set, once the scale set is known.
	Client     *github.Client
	ScaleSetID int
	// Assigned is GitHub's totalAssignedJobs: jobs waiting or running.
	Assigned int
	// Known: Assigned came from the session that is open now.
	Known bool
	// Listening: the message session is open and answers.
	Listening bool
	// SessionID is the message session opened last.
	SessionID string
	// Err is the last error, cleared when a session opens.
	Err *Problem
	// Started are jobs GitHub gave the set's runners, by runner name.
	Started map[string]macvirtv1alpha1.RunnerJob
	// Completed are the results of jobs that ended, by runner name.
	Completed map[string]string
	// WaitingSince is since when, without a break, at least one job
	// assigned to the scale set has waited for a runner (GitHub's assigned
	// jobs above its running ones); zero when none waits.
	WaitingSince time.Time
	// Runners are the scale set's runners as GitHub listed them last, and
	// when.
	Runners   []github.Runner
	RunnersAt time.Time
}

// Problem is an error from GitHub, explained, and when it happened.
type Problem struct {
	github.Explanation
	At time.Time
}

// Demand is a copy of key's demand.
func (l *Listeners) Demand(key types.NamespacedName) Demand {
	l.mu.Lock()
	s, ok := l.sets[key]
	l.mu.Unlock()
	if !ok {
		return Demand{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Demand{Running: true, Client: s.client, ScaleSetID: s.scaleSetID, Assigned: s.assigned, Known: s.known && s.listening, Listening: s.listening, SessionID: s.sessionID,
		Started: make(map[string]macvirtv1alpha1.RunnerJob, len(s.started)), Completed: make(map[string]string, len(s.completed)),
		Runners: s.runners, RunnersAt: s.runnersAt}
	if s.err != nil {
		p := *s.err
		d.Err = &p
	}
	for k, v := range s.started {
		d.Started[k] = v
	}
	for k, v := range s.completed {
		d.Completed[k] = v
	}
	d.WaitingSince = s.waitingSince
	return d
}

// Forget drops what the listener knows of runners that are gone.
func (l *Listeners) Forget(key types.NamespacedName, names ...string) {
	l.mu.Lock()
	s, ok := l.sets[key]
	l.mu.Unlock()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.started, n)
		delete(s.completed, n)
	}
}

// RecordRunners keeps the runners GitHub listed for key.
func (l *Listeners) RecordRunners(key types.NamespacedName, runners []github.Runner, at time.Time) {
	l.mu.Lock()
	s, ok := l.sets[key]
	l.mu.Unlock()
	if !ok {
		return
	}
	s.mu.Lock()
	s.runners, s.runnersAt = runners, at
	s.mu.Unlock()
}

// RecordError records an error GitHub answered the reconciler with.
func (l *Listeners) RecordError(key types.NamespacedName, p Problem) {
	metrics.RunnerSetGitHubErrors.WithLabelValues(key.Namespace, key.Name, strconv.Itoa(p.StatusCode)).Inc()
	l.mu.Lock()
	s, ok := l.sets[key]
	l.mu.Unlock()
	if ok {
		s.mu.Lock()
		s.err = &p
		s.mu.Unlock()
	}
}

// Hold is the demand key's set works from while GitHub is not heard (the
// session is being opened, refused while another lives, or failing): what
// remains of the jobs assigned when GitHub last spoke in this process, or
// of kept (the count the set's status kept) when it never has, after the
// runners that ended since the status showed them (runnercore.Held). It
// reports false while GitHub's own count is known, which ends the hold.
func (l *Listeners) Hold(key types.NamespacedName, kept int, shown []macvirtv1alpha1.RunnerStatus, runners []runnercore.Facts) (int, bool) {
	l.mu.Lock()
	s, ok := l.sets[key]
	l.mu.Unlock()
	if !ok {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known && s.listening {
		s.hold = nil
		return 0, false
	}
	var h runnercore.Hold
	switch {
	case s.hold != nil:
		h = *s.hold
	case s.said:
		h = runnercore.StartHold(s.assigned, shown)
	default:
		h = runnercore.StartHold(kept, shown)
	}
	h = runnercore.Held(h, runners)
	s.hold = &h
	return h.Remaining(), true
}

// trigger wakes key's reconcile; a full channel drops the event, as the
// reconcile requeues itself while runners are active.
func (l *Listeners) trigger(key types.NamespacedName) {
	select {
	case l.Events <- event.GenericEvent{Object: &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
	}
}

// setListener is one set's listener and what it learned.
type setListener struct {
	key    types.NamespacedName
	cfg    ListenerConfig
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	client     *github.Client
	scaleSetID int
	assigned   int
	known      bool
	listening  bool
	err        *Problem
	started    map[string]macvirtv1alpha1.RunnerJob
	completed  map[string]string
	// waitingSince: see Demand.WaitingSince.
	waitingSince time.Time
	runners      []github.Runner
	runnersAt    time.Time
	// said: assigned is what GitHub said in this process (else the hold
	// starts from the count the set's status kept).
	said bool
	// hold is the demand worked from while GitHub is not heard; nil while
	// it is.
	hold *runnercore.Hold
	// sessionID is the message session opened last; closed, the recalled
	// one this listener tried to close (it tries each once).
	sessionID, closed string
}

// run keeps the set's session until ctx ends, backing off after failures.
func (s *setListener) run(ctx context.Context, l *Listeners) {
	defer close(s.done)
	log := ctrl.Log.WithName("runner-set-listener").WithValues("runnerSet", s.key)
	backoff := l.Backoff
	for ctx.Err() == nil {
		ran, err := s.session(ctx, l, &backoff)
		if ctx.Err() != nil {
			return
		}
		if ran {
			backoff = l.Backoff
		}
		log.Info("the scale set's listener stopped; retrying", "after", backoff, "error", err.Error())
		s.fail(err, l)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, l.MaxBackoff)
	}
}

// session opens the scale set's message session and polls it, retrying a
// failed poll on the same session a few times. It reports whether a
// session was opened.
func (s *setListener) session(ctx context.Context, l *Listeners, backoff *time.Duration) (bool, error) {
	c, err := github.New(s.cfg.Scope, s.cfg.Credentials, l.Client)
	if err != nil {
		return false, err
	}
	id, err := c.EnsureScaleSet(ctx, s.cfg.ScaleSetName, s.cfg.RunnerGroup, s.cfg.Labels)
	s.mu.Lock()
	s.client = c
	if err == nil {
		s.scaleSetID = id
	}
	s.mu.Unlock()
	if err != nil {
		return false, err
	}
	l.trigger(s.key)
	sess, err := c.Session(ctx, id, l.Owner)
	if err != nil && c.Explain(err).Conflict {
		if old := l.recall(s.key); old != "" && old != s.closed {
			log := ctrl.Log.WithName("runner-set-listener").WithValues("runnerSet", s.key, "session", old)
			open, cerr := c.CloseSession(ctx, id, old)
			if cerr == nil {
				// Tried for good: closed, or gone (another listener's
				// session is the one open). A failed try is tried again.
				s.closed = old
			}
			switch {
			case cerr != nil:
				log.Info("could not close the message session the set's status names; trying again", "error", cerr.Error())
			case open:
				log.Info("closed the message session an earlier operator left open")
				sess, err = c.Session(ctx, id, l.Owner)
			default:
				log.Info("the message session the set's status names is gone; another listener holds the scale set's")
			}
		}
	}
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = sess.Close(closeCtx)
	}()
	s.mu.Lock()
	s.listening, s.err, s.sessionID = true, nil, sess.Session().SessionID.String()
	s.mu.Unlock()
	l.trigger(s.key)
	defer func() {
		s.mu.Lock()
		s.listening, s.known = false, false
		s.mu.Unlock()
	}()
	// The session is kept through failed polls: closing it in an outage
	// would fail, and GitHub would refuse a new one (409) until the old one
	// expired. A session GitHub says it no longer has is given up at once,
	// and one whose polls have failed for longer than GitHub keeps an
	// unpolled session (whatever the answers said) too.
	var failingSince time.Time
	for reused := false; ; reused = true {
		sc := &scaler{set: s, l: l, reused: reused}
		lis, err := listener.New(sess, listener.Config{ScaleSetID: id, MaxRunners: s.cfg.MaxRunners}, listener.WithMetricsRecorder(sc))
		if err != nil {
			return true, err
		}
		err = lis.Run(ctx, sc)
		if ctx.Err() != nil {
			return true, nil
		}
		s.mu.Lock()
		s.known, s.listening = false, false
		s.mu.Unlock()
		if failingSince.IsZero() || sc.answered || sc.fresh {
			// The first failure, or the first since a poll answered.
			failingSince = time.Now()
		}
		if giveUpSession(err, time.Since(failingSince)) {
			return true, err
		}
		s.fail(err, l)
		if !sleep(ctx, *backoff) {
			return true, nil
		}
		*backoff = min(2**backoff, l.MaxBackoff)
	}
}

// sessionLife bounds how long a session whose polls fail is kept: about
// how long GitHub keeps a session nobody polls.
const sessionLife = 2 * time.Minute

// giveUpSession decides whether a session whose polls have failed for
// failing, the last with err, is given up for a new one: at once when
// GitHub says it no longer has it, else once it has failed longer than
// GitHub keeps a session nobody polls, whatever the answers said (GitHub
// has then dropped it, and a poll of it would never succeed).
func giveUpSession(err error, failing time.Duration) bool {
	return github.SessionGone(err) || failing > sessionLife
}

// fail records err as the set's last error from GitHub.
func (s *setListener) fail(err error, l *Listeners) {
	if err == nil {
		return
	}
	s.mu.Lock()
	c := s.client
	s.mu.Unlock()
	var e github.Explanation
	if c != nil {
		e = c.Explain(err)
	} else {
		e = github.Explanation{Message: err.Error()}
	}
	l.RecordError(s.key, Problem{Explanation: e, At: time.Now()})
	l.trigger(s.key)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// scaler takes the listener's messages: GitHub's statistics and jobs.
type scaler struct {
	set *setListener
	l   *Listeners
	// reused: the session is polled again after a failure, so the
	// statistics the listener starts with are those of the session's
	// opening (or its last refresh), not GitHub's now; only a message's
	// are believed.
	reused bool
	// opened: the listener's first statistics, its session's, went by.
	opened bool
	// fresh: statistics from a message arrived.
	fresh bool
	// counted: HandleDesiredRunnerCount was called (first with the
	// session's statistics, then after each poll); answered: a poll was.
	counted, answered bool
}

func (sc *scaler) HandleDesiredRunnerCount(_ context.Context, count int) (int, error) {
	s := sc.set
	polled := sc.counted || !sc.reused
	sc.counted = true
	sc.answered = sc.answered || (polled && sc.reused)
	s.mu.Lock()
	changed := !s.listening && polled
	if polled {
		s.listening = true
	}
	switch {
	case !sc.reused || sc.fresh:
		changed = changed || s.assigned != count || !s.known
		s.assigned, s.known, s.said, s.hold = count, true, true, nil
	case polled:
		// A reused session answered with no message waiting: GitHub
		// keeps a message until it is acknowledged, so nothing happened
		// since the count this listener believed last, which holds again.
		changed = changed || !s.known
		s.known, s.hold = true, nil
	}
	s.mu.Unlock()
	metrics.RunnerSetAssignedJobs.WithLabelValues(s.key.Namespace, s.key.Name).Set(float64(count))
	if changed {
		sc.l.trigger(s.key)
	}
	return min(count, s.cfg.MaxRunners), nil
}

// RecordStatistics follows whether jobs wait: GitHub's assigned jobs above
// its running ones.
func (sc *scaler) RecordStatistics(st *scaleset.RunnerScaleSetStatistic) {
	if st == nil {
		return
	}
	if sc.reused && !sc.opened {
		sc.opened = true
		return
	}
	sc.fresh = true
	s := sc.set
	s.mu.Lock()
	switch waiting := st.TotalAssignedJobs > st.TotalRunningJobs; {
	case waiting && s.waitingSince.IsZero():
		s.waitingSince = time.Now()
	case !waiting:
		s.waitingSince = time.Time{}
	}
	since := s.waitingSince
	s.mu.Unlock()
	age := 0.0
	if !since.IsZero() {
		age = time.Since(since).Seconds()
	}
	metrics.RunnerSetJobsWaiting.WithLabelValues(s.key.Namespace, s.key.Name).Set(age)
}

// RecordJobStarted: the scaler's HandleJobStarted records it.
func (sc *scaler) RecordJobStarted(*scaleset.JobStarted) {}

// RecordJobCompleted: the scaler's HandleJobCompleted records it.
func (sc *scaler) RecordJobCompleted(*scaleset.JobCompleted) {}

// RecordDesiredRunners: the status shows it.
func (sc *scaler) RecordDesiredRunners(int) {}

func (sc *scaler) HandleJobStarted(_ context.Context, j *scaleset.JobStarted) error {
	s := sc.set
	if j.RunnerName == "" {
		return nil
	}
	job := macvirtv1alpha1.RunnerJob{ID: j.JobID, DisplayName: j.JobDisplayName, WorkflowRunID: j.WorkflowRunID}
	if j.OwnerName != "" && j.RepositoryName != "" {
		job.Repository = j.OwnerName + "/" + j.RepositoryName
	}
	started := j.RunnerAssignTime
	if started.IsZero() {
		started = time.Now()
	}
	t := metav1.NewTime(started)
	job.StartedAt = &t
	s.mu.Lock()
	s.started[j.RunnerName] = job
	s.mu.Unlock()
	if !j.ScaleSetAssignTime.IsZero() && !j.RunnerAssignTime.IsZero() {
		metrics.RunnerSetQueueWait.WithLabelValues(s.key.Namespace, s.key.Name).
			Observe(j.RunnerAssignTime.Sub(j.ScaleSetAssignTime).Seconds())
	}
	sc.l.trigger(s.key)
	return nil
}

func (sc *scaler) HandleJobCompleted(_ context.Context, j *scaleset.JobCompleted) error {
	s := sc.set
	s.mu.Lock()
	if j.RunnerName != "" {
		s.completed[j.RunnerName] = j.Result
	}
	s.mu.Unlock()
	sc.l.trigger(s.key)
	return nil
}
