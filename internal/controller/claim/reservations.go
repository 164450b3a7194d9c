package claim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/macvirt/macvirt/internal/controller/base"
)

// reservationTTL bounds how long a won machine is skipped: long enough for
// the cache to show its claimRef, short enough that a lost update is retried.
const reservationTTL = 30 * time.Second

// reservations is an in-process set of machines being bound (false) or
// just bound (true) by a worker of this operator, by UID: a pool makes a
// machine again under the name of one bound and deleted (its slot), and
// the new one is free at once.
type reservations struct {
	held base.Assumed[types.UID, bool]
}

// A machine's standing for one more binding attempt.
const (
	// reserved: the caller holds it now.
	reserved = iota
	// beingBound: another worker is writing its binding; whether that
	// worker gets it is not known yet.
	beingBound
	// alreadyWon: a worker of this process bound it; the cache has not
	// shown it yet.
	alreadyWon
)

// reserve takes key for one binding attempt, or says why not.
func (r *reservations) reserve(key types.UID, now time.Time) int {
	won, held := r.held.LoadOrAssume(key, false, now, reservationTTL)
	switch {
	case !held:
		return reserved
	case won:
		return alreadyWon
	}
	return beingBound
}

// won marks key bound by this process.
func (r *reservations) won(key types.UID, now time.Time) {
	r.held.Assume(key, true, now, reservationTTL)
}

// release gives key back after a lost or failed attempt.
func (r *reservations) release(key types.UID) {
	r.held.Forget(key)
}

// retainLedger bounds the machines a namespace keeps under Retain even when
// its claims come in a burst: the cache lags the binds this operator has
// just made, so a count taken from it alone lets every claim of the burst
// pass. Binds of one namespace and class under a bound are serialised, and
// the machines bound recently are counted with those the cache shows.
//
// The recent binds are a base.Assumed; the locks are not: they are held
// across a count and the bind it allows, a critical section the API server
// cannot guard (the bound is a count over many machines, not one object's
// resourceVersion), which no record of the cache's lag stands in for.
type retainLedger struct {
	mu     sync.Mutex
	locks  map[string]*sync.Mutex
	recent base.Assumed[retainedBind, struct{}]
}

// retainedBind is a machine bound under Retain for a namespace and class
// (index.RetainedKey).
type retainedBind struct {
	key string
	uid types.UID
}

// lock serialises the check and the bind of Retain claims for key.
func (l *retainLedger) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m, ok := l.locks[key]
	if !ok {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// record notes a machine just bound under Retain for key.
func (l *retainLedger) record(key string, uid types.UID, now time.Time) {
	l.recent.Assume(retainedBind{key: key, uid: uid}, struct{}{}, now, reservationTTL)
}

// count is how many machines key retains: those the cache lists plus those
// bound within reservationTTL that it has not listed yet.
func (l *retainLedger) count(key string, cached []types.UID, now time.Time) int {
	seen := make(map[types.UID]bool, len(cached))
	for _, uid := range cached {
		seen[uid] = true
	}
	n := len(seen)
	for b := range l.recent.All(now) {
		switch {
		case b.key != key:
		case seen[b.uid]:
			// Once the cache has shown it, the cache is the authority:
			// a machine deleted since no longer counts.
			l.recent.Forget(b)
		default:
			n++
		}
	}
	return n
}

// assumeTTL bounds how long a binding this process made stands in for the
// cache's view of it: far longer than the cache lags, short enough that a
// machine whose binding was undone by hand is not assumed for ever.
const assumeTTL = 2 * time.Minute

// createdSecret is the connection Secret this process created for a claim,
// kept (by claim UID) until the claim's status records it: a status write
// lost after the create (a conflict) must not make the claim take its own
// Secret for someone else's.
type createdSecret struct {
	name string
	uid  types.UID
}
