package guestagent

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Watch holds the operator's watch (guestprotocol.WatchPath) with the
// revision of the last answer, and returns the revision the operator
// answers: another one once the desired state changed, the same one when
// the hold ended. An operator from before the watch answers a StatusError
// of code 404 (SpeaksV1 reports it).
func (c *Client) Watch(ctx context.Context, revision string) (string, error) {
	answer := &guestprotocol.WatchAnswer{}
	req := guestprotocol.WatchRequest{Machine: guestprotocol.MachineRef{Namespace: c.cfg.Namespace, Name: c.cfg.Machine}, Revision: revision}
	if err := c.postWith(ctx, c.watchHTTP(), guestprotocol.WatchPath, req, guestprotocol.MaxWatchBodyBytes, answer); err != nil {
		return "", err
	}
	return answer.Revision, nil
}

// watchHTTP is the client's HTTP client with a timeout beyond the hold.
func (c *Client) watchHTTP() *http.Client {
	return &http.Client{Transport: c.http.Transport, Timeout: guestprotocol.WatchHold + 20*time.Second}
}

// watcher keeps one watch held for a Speaker, from the first answered
// heartbeat on, and signals Pushed when the operator answers a revision
// other than the last heartbeat's.
type watcher struct {
	mu     sync.Mutex
	client *Client
	heard  string
	// answered is signalled at every answered heartbeat.
	answered chan struct{}
	pushed   chan struct{}
	started  bool
	cancel   context.CancelFunc
	logf     func(string, ...any)
}

// WatchRetry is the first wait after a failed watch; failures back off to
// the heartbeat interval's default.
var WatchRetry = time.Second

// WatchSpacing is the least time between the starts of two watches.
var WatchSpacing = 250 * time.Millisecond

// heardFrom records an answered heartbeat: its client and revision, and
// starts the watch with the first (an answer with no revision is an
// operator from before the watch).
func (w *watcher) heardFrom(ctx context.Context, c *Client, revision string, logf func(string, ...any)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init(logf)
	w.client, w.heard = c, revision
	if !w.started && revision != "" {
		w.started = true
		ctx, w.cancel = context.WithCancel(ctx)
		go w.run(ctx)
	}
	select {
	case w.answered <- struct{}{}:
	default:
	}
}

// init makes the channels; the caller holds mu.
func (w *watcher) init(logf func(string, ...any)) {
	if w.pushed == nil {
		w.pushed, w.answered, w.logf = make(chan struct{}, 1), make(chan struct{}, 1), logf
	}
}

func (w *watcher) current() (*Client, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.client, w.heard
}

func (w *watcher) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}

// run watches until ctx ends. After a push it waits for the heartbeat it
// asked for to be answered (however long the agent's backoff makes that),
// so a failing operator is never asked in a loop.
func (w *watcher) run(ctx context.Context) {
	failures := 0
	var last time.Time
	for {
		// Watches are spaced, so an endpoint that answers at once (a
		// faulty one, or one in the middle) is not asked in a loop, nor
		// are heartbeats pushed in one.
		if wait := time.Until(last.Add(WatchSpacing)); wait > 0 && !sleep(ctx, wait) {
			return
		}
		last = time.Now()
		select {
		case <-w.answered:
		default:
		}
		c, since := w.current()
		rev, err := c.Watch(ctx, since)
		if ctx.Err() != nil {
			return
		}
		var se *StatusError
		switch {
		case SpeaksV1(err):
			// An operator rolled back to one without the watch: the
			// heartbeats carry everything, and the watch is tried again.
			if !sleep(ctx, V2Retry) {
				return
			}
			continue
		case errors.As(err, &se) && se.Code == http.StatusUnauthorized:
			// A new token: the heartbeat reads the disk again.
			if !w.waitAnswered(ctx) {
				return
			}
			continue
		case err != nil:
			wait := Backoff(failures, WatchRetry, guestprotocol.DefaultHeartbeatInterval)
			failures++
			if w.logf != nil {
				w.logf("watch failed (again in %s): %v", wait.Round(time.Millisecond), err)
			}
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		failures = 0
		if _, heard := w.current(); rev == heard {
			continue
		}
		select {
		case w.pushed <- struct{}{}:
		default:
		}
		if !w.waitAnswered(ctx) {
			return
		}
	}
}

func (w *watcher) waitAnswered(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-w.answered:
		return true
	}
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
