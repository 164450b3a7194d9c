package guestendpoint

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Changed tells the watches of a machine's agent that what its heartbeat
// would be answered may have changed: the operator calls it for every
// change its informers see of the machine, and of a claim, for the
// machine the claim names.
func (h *Handler) Changed(key types.NamespacedName) { h.watches.notify(key) }

// Watching is the number of watches held now.
func (h *Handler) Watching() int { return h.watches.held() }

// pendingRecheck is how often a held watch looks again while a part of
// the bootstrap waits for its source (a runner's JIT Secret made after its
// claim): the operator watches no Secret.
const pendingRecheck = 500 * time.Millisecond

// settle is how long after a heartbeat's write a watch waits for the cache
// to show it: what the write recorded (a task the agent took) changes the
// answer, and a watch that read the machine from before the write would
// answer a change that is none.
const settle = time.Second

// serveWatch holds a v2 agent's watch (guestprotocol.WatchPath) until the
// answer its machine's next heartbeat would get is not the one of the
// request's revision, or the hold ends. It writes nothing, and is limited
// per machine like heartbeats, apart from them.
func (h *Handler) serveWatch(w http.ResponseWriter, r *http.Request) {
	token, refused := checkBearerPost(w, r, "the machine's token")
	if refused != nil {
		writeWatchError(w, refused.code, refused.reason, refused.msg)
		return
	}
	req, err := guestprotocol.DecodeWatch(http.MaxBytesReader(w, r.Body, guestprotocol.MaxWatchBodyBytes))
	if refused := badBody(err, guestprotocol.MaxWatchBodyBytes); refused != nil {
		writeWatchError(w, refused.code, refused.reason, refused.msg)
		return
	}
	ctx := r.Context()
	key := types.NamespacedName{Namespace: req.Machine.Namespace, Name: req.Machine.Name}
	hold := h.WatchHold
	if hold <= 0 || hold > guestprotocol.WatchHold {
		hold = guestprotocol.WatchHold
	}
	// A fleet that watched at once does not come back at once.
	hold -= time.Duration(rand.Int64N(int64(hold/10) + 1)) //nolint:gosec // spreading needs no cryptographic randomness.
	end := time.NewTimer(hold)
	defer end.Stop()
	for first := true; ; first = false {
		wake, release := h.watches.wait(key)
		m := &macvirtv1alpha1.MacMachine{}
		err := h.Client.Get(ctx, key, m)
		switch {
		case apierrors.IsNotFound(err):
			release()
			writeWatchError(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, unauthorized)
			return
		case err != nil:
			release()
			writeWatchError(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the machine failed; retry")
			return
		}
		// Checked at every look: a resumed Mac's token is replaced.
		want := m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
		if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(guestprotocol.HashToken(token))) != 1 {
			release()
			writeWatchError(w, http.StatusUnauthorized, guestprotocol.ReasonUnauthorized, unauthorized)
			return
		}
		if msg := resumedUnheard(m); msg != "" {
			// The resumed guest proves its new identity with a
			// heartbeat (staleIdentity) before a watch tells it anything.
			release()
			writeWatchError(w, http.StatusConflict, guestprotocol.ReasonStaleIdentity, msg)
			return
		}
		if first {
			now := time.Now()
			// A name holds no slash: the watch's limiter is its own.
			if !h.limiter(types.NamespacedName{Namespace: key.Namespace, Name: key.Name + "/watch"}, now).AllowN(now, 1) {
				release()
				w.Header().Set("Retry-After", "1")
				writeWatchError(w, http.StatusTooManyRequests, guestprotocol.ReasonRateLimited, "watches too frequent; watch again with the revision of the last answer")
				return
			}
			// An agent holds one watch (two while a restarted agent's
			// first one overlaps its last): a guest cannot pile up held
			// requests, each a connection and two goroutines here.
			if !h.watches.hold(key) {
				release()
				w.Header().Set("Retry-After", "1")
				writeWatchError(w, http.StatusTooManyRequests, guestprotocol.ReasonRateLimited,
					fmt.Sprintf("this machine already holds %d watches; an agent holds one", maxHeldPerMachine))
				return
			}
			defer h.watches.unhold(key)
			// The server's read and write timeouts are for requests
			// answered at once; this one, authenticated, is answered
			// within the hold.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(hold + 10*time.Second))
			_ = rc.SetWriteDeadline(time.Now().Add(hold + 10*time.Second))
		}
		recheck := time.Duration(0)
		if due := h.watches.settledAt(key, m.ResourceVersion); due.After(h.now()) {
			recheck = due.Sub(h.now())
		} else {
			var reported []macvirtv1alpha1.GuestTaskStatus
			if g := m.Status.Guest; g != nil {
				reported = g.Tasks
			}
			state, tasks, err := h.desiredState(ctx, m, guestprotocol.VersionV2, reported)
			if err != nil {
				release()
				ctrl.LoggerFrom(ctx).Error(err, "reading a machine's desired state for its watch", "machine", key)
				writeWatchError(w, http.StatusInternalServerError, guestprotocol.ReasonInternal, "reading the desired state failed; retry")
				return
			}
			if rev := guestprotocol.Revision(*state); rev != req.Revision {
				release()
				watchAnswers.WithLabelValues(resultChanged).Inc()
				answerWatch(w, rev)
				return
			}
			if waitingForSource(tasks) {
				recheck = pendingRecheck
			}
		}
		var again <-chan time.Time
		stop := func() bool { return false }
		if recheck > 0 {
			t := time.NewTimer(recheck)
			again, stop = t.C, t.Stop
		}
		select {
		case <-wake:
		case <-again:
		case <-end.C:
			release()
			watchAnswers.WithLabelValues(resultUnchanged).Inc()
			answerWatch(w, req.Revision)
			return
		case <-ctx.Done():
			release()
			stop()
			return
		}
		stop()
		release()
		// Looks are spaced: however often the machine or its claim
		// changes (a tenant may edit its claim as often as it likes),
		// a watch reads what a look reads (a bootstrap's Secrets, from
		// the API server) at most every minLook. Changes meanwhile are
		// seen by the next look.
		select {
		case <-time.After(minLook):
		case <-ctx.Done():
			return
		}
	}
}

// minLook is the least time between two looks of one watch.
const minLook = 250 * time.Millisecond

// watchAnswers counts the endpoint's answers to watches by result.
var watchAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_agent_watches_total",
	Help: "Watches the guest-agent endpoint answered, by result: Changed (the agent's desired state changed while it watched), Unchanged (the hold ended), or the refusal's reason.",
}, []string{"result"})

// watchesHeld is the number of watches held now.
var watchesHeld = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "macvirt_agent_watches_held",
	Help: "Guest agents' watches this replica holds now: about one per running v2 agent connected to it.",
})

// resumedUnheard says why a watch is refused while the machine's guest,
// resumed from a saved state, has not been heard since: its heartbeat is
// where a stale identity is refused (staleIdentity). Empty otherwise.
func resumedUnheard(m *macvirtv1alpha1.MacMachine) string {
	hv, g := m.Status.Host, m.Status.Guest
	if hv == nil || hv.Resumes == 0 || (g != nil && g.Resumes >= hv.Resumes) {
		return ""
	}
	return "this guest was resumed and has not heartbeated since; heartbeat first, with new SSH host keys"
}

// The results a watch is counted by besides its refusals' reasons.
const (
	resultChanged   = "Changed"
	resultUnchanged = "Unchanged"
)

func answerWatch(w http.ResponseWriter, rev string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(guestprotocol.WatchAnswer{Revision: rev})
}

func writeWatchError(w http.ResponseWriter, code int, reason, msg string) {
	watchAnswers.WithLabelValues(reason).Inc()
	writeProblem(w, code, reason, msg)
}

// maxHeldPerMachine is the most watches one machine's token holds at once.
const maxHeldPerMachine = 2

// watches is where held watches wait for their machine's changes, how
// many each machine holds, and when the endpoint last wrote each machine.
type watches struct {
	mu      sync.Mutex
	holding map[types.NamespacedName]int
	waiting map[types.NamespacedName]*wakeup
	writes  map[types.NamespacedName]written
	// sweepAt is the number of writes at which the next one first
	// forgets those settled (minSweepAt at first).
	sweepAt int
}

// wakeup is closed at the machine's next change; count is how many wait.
type wakeup struct {
	ch    chan struct{}
	count int
}

// written is the resource version a heartbeat wrote and when.
type written struct {
	version string
	at      time.Time
}

// hold counts a watch of the machine as held, unless it holds
// maxHeldPerMachine already.
func (ws *watches) hold(key types.NamespacedName) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.holding == nil {
		ws.holding = map[types.NamespacedName]int{}
	}
	if ws.holding[key] >= maxHeldPerMachine {
		return false
	}
	ws.holding[key]++
	watchesHeld.Inc()
	return true
}

func (ws *watches) unhold(key types.NamespacedName) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	watchesHeld.Dec()
	if ws.holding[key]--; ws.holding[key] <= 0 {
		delete(ws.holding, key)
	}
}

// wait returns a channel closed at the machine's next change, and the
// function to call once the caller no longer waits on it.
func (ws *watches) wait(key types.NamespacedName) (<-chan struct{}, func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.waiting == nil {
		ws.waiting = map[types.NamespacedName]*wakeup{}
	}
	wu := ws.waiting[key]
	if wu == nil {
		wu = &wakeup{ch: make(chan struct{})}
		ws.waiting[key] = wu
	}
	wu.count++
	once := sync.Once{}
	return wu.ch, func() {
		once.Do(func() {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			wu.count--
			if wu.count == 0 && ws.waiting[key] == wu {
				delete(ws.waiting, key)
			}
		})
	}
}

func (ws *watches) notify(key types.NamespacedName) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if wu := ws.waiting[key]; wu != nil {
		close(wu.ch)
		delete(ws.waiting, key)
	}
}

// held is the number of watches held now, between their authentication
// and their answer (a watch spacing its looks included).
func (ws *watches) held() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	n := 0
	for _, c := range ws.holding {
		n += c
	}
	return n
}

// wrote records that a heartbeat wrote the machine at version.
func (ws *watches) wrote(key types.NamespacedName, version string, at time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.writes == nil {
		ws.writes = map[types.NamespacedName]written{}
	}
	if len(ws.writes) >= max(ws.sweepAt, minSweepAt) {
		for k, w := range ws.writes {
			if at.Sub(w.at) >= settle {
				delete(ws.writes, k)
			}
		}
		ws.sweepAt = 2 * len(ws.writes)
	}
	ws.writes[key] = written{version: version, at: at}
}

// settledAt is when a watch may judge the machine as read at version: at
// once (the zero time) unless a heartbeat wrote another version less than
// settle ago, which the cache has not shown yet, or has and shows a later
// one (resource versions are not ordered, so only time tells).
func (ws *watches) settledAt(key types.NamespacedName, version string) time.Time {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.writes[key]
	if !ok || w.version == version {
		return time.Time{}
	}
	return w.at.Add(settle)
}
