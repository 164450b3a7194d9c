package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// reservationTTL bounds how long a won machine is skipped: long enough for
// the cache to show its claimRef, short enough that a lost update is retried.
const reservationTTL = 30 * time.Second

// reservations is an in-process set of machines being bound or just bound.
type reservations struct {
	mu    sync.Mutex
	items map[types.NamespacedName]time.Time
}

// reserve takes key for one binding attempt; false if another worker holds it.
func (r *reservations) reserve(key types.NamespacedName, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.items == nil {
		r.items = map[types.NamespacedName]time.Time{}
	}
	if at, held := r.items[key]; held && now.Sub(at) < reservationTTL {
		return false
	}
	if len(r.items) > 1024 {
		for k, at := range r.items {
			if now.Sub(at) >= reservationTTL {
				delete(r.items, k)
			}
		}
	}
	r.items[key] = now
	return true
}

// release gives key back after a lost or failed attempt.
func (r *reservations) release(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.items, key)
}
