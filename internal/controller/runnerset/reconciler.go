package runnerset

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reconciler keeps a runner set's runners: one claim per runner up to
// GitHub's assigned jobs (never above maxRunners), each released after its
// job, and nothing registered on GitHub that no claim backs.
type Reconciler struct {
	client.Client
	// APIReader reads the credentials and JIT Secrets (never cached: the
	// operator may read Secrets only where a namespace lets it) and
	// confirms a claim is gone before its runner is removed as an orphan.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Listeners *Listeners
	// Resync is how often GitHub's runner list is read, for runners'
	// online state and orphans (default 15 s).
	Resync         time.Duration
	ControllerName string

	// jit remembers the claims whose JIT Secret exists.
	jit jitRecord
}

// jitRecord is the claims whose JIT Secret is known to exist.
type jitRecord struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

func (j *jitRecord) has(uid types.UID) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.uids[uid]
}

func (j *jitRecord) add(uid types.UID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.uids == nil {
		j.uids = map[types.UID]bool{}
	}
	j.uids[uid] = true
}

func (j *jitRecord) forget(uid types.UID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.uids, uid)
}
