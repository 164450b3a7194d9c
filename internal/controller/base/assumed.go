package base

import (
	"iter"
	"sync"
	"time"
)

// UntilForgotten is the time-to-live of a record that stands until its
// caller forgets it.
const UntilForgotten time.Duration = 0

// pruneAbove is how many records an Assumed holds before a new one first
// sweeps out the expired.
const pruneAbove = 1024

// Assumed is what this process knows, or did, that its informer cache may
// not show yet, by key: a machine it has just bound to a claim, a placement
// it has just written, a Secret it has just created or read, a warning it
// has already given. A reconcile reads its cache, which lags the writes
// this very process made a moment ago; without such a record the next
// reconcile, its cache behind, would bind a second machine, fill a host's
// last slot twice or warn again. It is the assume cache of the Kubernetes
// PersistentVolume controller and KubeVirt's expectations, in one small
// form.
//
// It only spares this process from losing races to itself, or from
// repeating itself; no record is a lock. Every race with another writer
// (another worker's stale copy, another operator during a leader
// hand-over) is still decided by the API server: resourceVersion and UID
// preconditions, deterministic names, claimRefs written once. A record
// lost with a restart, or expired, costs a wait, a retry or an event given
// twice, never a write the API server would otherwise have refused.
//
// Each record has a time-to-live from when it was made (UntilForgotten:
// none); an expired record is as good as none. Times are passed in, as the
// reconciler's clock tells them, so a test's fake clock runs them. Expired
// records are swept out when the set grows past a thousand. The zero value
// is ready to use; it is safe for concurrent use.
type Assumed[K comparable, V any] struct {
	mu    sync.Mutex
	items map[K]assumption[V]
}

// assumption is one record: its value, when it was made and for how long
// it stands.
type assumption[V any] struct {
	value V
	at    time.Time
	ttl   time.Duration
}

// expired says the record no longer stands at now.
func (a assumption[V]) expired(now time.Time) bool {
	return a.ttl > 0 && now.Sub(a.at) >= a.ttl
}

// Assume records value for key at now, standing for ttl (UntilForgotten:
// until Forget), in place of any record key had.
func (a *Assumed[K, V]) Assume(key K, value V, now time.Time, ttl time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.put(key, assumption[V]{value: value, at: now, ttl: ttl}, now)
}

// LoadOrAssume is the record key has at now, loaded true; or, when it has
// none standing, records value as Assume does and returns it, loaded false.
// Of concurrent callers with one key, exactly one records: what is to be
// done once (bind, warn) is done by the one that did not load.
func (a *Assumed[K, V]) LoadOrAssume(key K, value V, now time.Time, ttl time.Duration) (actual V, loaded bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.items[key]; ok && !v.expired(now) {
		return v.value, true
	}
	a.put(key, assumption[V]{value: value, at: now, ttl: ttl}, now)
	return value, false
}

// Get is key's record standing at now and when it was made; ok false when
// there is none, or it expired (and is then dropped).
func (a *Assumed[K, V]) Get(key K, now time.Time) (value V, at time.Time, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.items[key]
	if !ok {
		return value, at, false
	}
	if v.expired(now) {
		delete(a.items, key)
		return value, at, false
	}
	return v.value, v.at, true
}

// Forget drops key's record: the cache shows it now, or it no longer
// matters (the object is gone).
func (a *Assumed[K, V]) Forget(key K) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.items, key)
}

// All yields the records standing at now, as they were when the loop
// began; the loop may Forget or Assume meanwhile. Expired records are
// dropped.
func (a *Assumed[K, V]) All(now time.Time) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		type record struct {
			key   K
			value V
		}
		a.mu.Lock()
		standing := make([]record, 0, len(a.items))
		for k, v := range a.items {
			if v.expired(now) {
				delete(a.items, k)
				continue
			}
			standing = append(standing, record{k, v.value})
		}
		a.mu.Unlock()
		for _, r := range standing {
			if !yield(r.key, r.value) {
				return
			}
		}
	}
}

// put stores v for key, first sweeping out the expired records when there
// are many. Called with the lock held.
func (a *Assumed[K, V]) put(key K, v assumption[V], now time.Time) {
	if a.items == nil {
		a.items = map[K]assumption[V]{}
	}
	if len(a.items) > pruneAbove {
		for k, old := range a.items {
			if old.expired(now) {
				delete(a.items, k)
			}
		}
	}
	a.items[key] = v
}
