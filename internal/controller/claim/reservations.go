package claim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// reservationTTL bounds how long a won machine is skipped: long enough for
// the cache to show its claimRef, short enough that a lost update is retried.
const reservationTTL = 30 * time.Second

// reservations is an in-process set of machines being bound or just bound.
type reservations struct {
	mu    sync.Mutex
	items map[types.NamespacedName]reservation
}

type reservation struct {
	at  time.Time
	won bool
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
func (r *reservations) reserve(key types.NamespacedName, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.items == nil {
		r.items = map[types.NamespacedName]reservation{}
	}
	if held, ok := r.items[key]; ok && now.Sub(held.at) < reservationTTL {
		if held.won {
			return alreadyWon
		}
		return beingBound
	}
	if len(r.items) > 1024 {
		for k, v := range r.items {
			if now.Sub(v.at) >= reservationTTL {
				delete(r.items, k)
			}
		}
	}
	r.items[key] = reservation{at: now}
	return reserved
}

// won marks key bound by this process.
func (r *reservations) won(key types.NamespacedName, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items[key] = reservation{at: now, won: true}
}

// release gives key back after a lost or failed attempt.
func (r *reservations) release(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.items, key)
}

// retainLedger bounds the machines a namespace keeps under Retain even when
// its claims come in a burst: the cache lags the binds this operator has
// just made, so a count taken from it alone lets every claim of the burst
// pass. Binds of one namespace and class under a bound are serialised, and
// the machines bound recently are counted with those the cache shows.
type retainLedger struct {
	mu     sync.Mutex
	locks  map[string]*sync.Mutex
	recent map[string]map[types.UID]time.Time
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recent == nil {
		l.recent = map[string]map[types.UID]time.Time{}
	}
	if l.recent[key] == nil {
		l.recent[key] = map[types.UID]time.Time{}
	}
	l.recent[key][uid] = now
}

// count is how many machines key retains: those the cache lists plus those
// bound within reservationTTL that it has not listed yet.
func (l *retainLedger) count(key string, cached []types.UID, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := make(map[types.UID]bool, len(cached))
	for _, uid := range cached {
		seen[uid] = true
	}
	n := len(seen)
	for uid, at := range l.recent[key] {
		switch {
		case seen[uid] || now.Sub(at) >= reservationTTL:
			// Once the cache has shown it, the cache is the authority:
			// a machine deleted since no longer counts.
			delete(l.recent[key], uid)
		default:
			n++
		}
	}
	if len(l.recent[key]) == 0 {
		delete(l.recent, key)
	}
	return n
}

// assumeTTL bounds how long a binding this process made stands in for the
// cache's view of it: far longer than the cache lags, short enough that a
// machine whose binding was undone by hand is not assumed for ever.
const assumeTTL = 2 * time.Minute

// assumed is an in-process record of the machines this process has just
// bound, by claim UID, as the PersistentVolume controller keeps its assume
// cache: until the cache shows a machine's claimRef, a claim found unbound
// there is known to hold it. It replaces the reservation the claim's status
// used to carry: within one process a claim can never be bound twice, and
// between processes (a leader hand-over) both try the same machine first
// (candidateOrder), so the second adopts the first one's binding.
type assumed struct {
	mu    sync.Mutex
	items map[types.UID]assumption
}

type assumption struct {
	machine *macvirtv1alpha1.MacMachine
	at      time.Time
}

// assume records m, as written with the claim's claimRef, at now.
func (a *assumed) assume(claim types.UID, m *macvirtv1alpha1.MacMachine, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items == nil {
		a.items = map[types.UID]assumption{}
	}
	if len(a.items) > 1024 {
		for k, v := range a.items {
			if now.Sub(v.at) >= assumeTTL {
				delete(a.items, k)
			}
		}
	}
	a.items[claim] = assumption{machine: m.DeepCopy(), at: now}
}

// get is the machine assumed bound to claim and when it was bound; nil
// when none is, or the record is older than assumeTTL.
func (a *assumed) get(claim types.UID, now time.Time) (*macvirtv1alpha1.MacMachine, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.items[claim]
	if !ok || now.Sub(v.at) >= assumeTTL {
		return nil, time.Time{}
	}
	return v.machine, v.at
}

// forget drops claim's record once the cache shows its binding, or the
// claim is gone.
func (a *assumed) forget(claim types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.items, claim)
}

// seenRecently remembers, for reservationTTL, what this process has just
// learnt of names its cache may not show yet: that it made one, or that one
// is someone else's.
type seenRecently struct {
	mu    sync.Mutex
	items map[string]sighting
}

type sighting struct {
	at      time.Time
	foreign bool
}

// saw records name at now: made by this process, or found to be foreign.
func (l *seenRecently) saw(name string, foreign bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.items == nil {
		l.items = map[string]sighting{}
	}
	l.items[name] = sighting{at: now, foreign: foreign}
}

// recent says whether name was recorded within reservationTTL of now, and
// whether it was found foreign.
func (l *seenRecently) recent(name string, now time.Time) (seen, foreign bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.items[name]
	if ok && now.Sub(v.at) >= reservationTTL {
		delete(l.items, name)
		return false, false
	}
	return ok, v.foreign
}

// createdSecrets remembers, by claim UID, the connection Secret this
// process created for the claim until its status records it: a status
// write lost after the create (a conflict) must not make the claim take its
// own Secret for someone else's.
type createdSecrets struct {
	mu    sync.Mutex
	items map[types.UID]createdSecret
}

type createdSecret struct {
	name string
	uid  types.UID
}

func (l *createdSecrets) record(claim types.UID, name string, uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.items == nil {
		l.items = map[types.UID]createdSecret{}
	}
	l.items[claim] = createdSecret{name: name, uid: uid}
}

// get is the Secret of name this process created for claim; its UID, or
// empty.
func (l *createdSecrets) get(claim types.UID, name string) types.UID {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.items[claim]; ok && v.name == name {
		return v.uid
	}
	return ""
}

func (l *createdSecrets) forget(claim types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.items, claim)
}
