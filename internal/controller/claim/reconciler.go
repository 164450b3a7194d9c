package claim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// Reconciler binds claims to machines. The machine side is written
// first (spec.claimRef, with the machine's resourceVersion, so two claims
// can never win the same machine), then the claim's status, once.
type Reconciler struct {
	client.Client
	// APIReader confirms, uncached, that a bound machine is really gone.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// MaxConcurrentReconciles is the number of claims bound in parallel.
	MaxConcurrentReconciles int
	ControllerName          string
	// ConnectionResync is how often a Ready claim's connection Secret (for
	// claims that ask for one) is created again, so one deleted by hand
	// comes back (the operator may not read Secrets);
	// DefaultConnectionResync when zero.
	ConnectionResync time.Duration
	// Classes finds the class revision a bound machine was made of, which
	// its claim's access follows; with no Snapshots, the live class.
	Classes classhistory.Resolver

	// connectionApplied holds when each claim's connection Secret was last
	// written or found in place by this process.
	connectionApplied base.Assumed[types.NamespacedName, struct{}]

	// assumed holds the machines this process has just bound, by claim
	// UID, for assumeTTL or until the claims' status records them, as the
	// PersistentVolume controller keeps its assume cache: until the cache
	// shows a machine's claimRef, a claim found unbound there is known to
	// hold it. Within one process a claim can never be bound twice; between
	// processes (a leader hand-over) both try the same machine first
	// (candidateOrder), so the second adopts the first one's binding.
	assumed base.Assumed[types.UID, *macvirtv1alpha1.MacMachine]

	// resuming is held while a claim weighs and binds suspended machines:
	// each takes a licence slot of its host to resume in, counted from the
	// cache and the bindings assumed above, one claim at a time, so two
	// claims never count the same free slot.
	resuming sync.Mutex

	// namespaceServices holds, for reservationTTL, the namespaces whose
	// headless Service this process has just made (false), or found to be
	// someone else's (true), which its cache may not show yet.
	namespaceServices base.Assumed[string, bool]

	// secrets holds the connection Secrets this process created, by claim
	// UID, until the claims' status records them.
	secrets base.Assumed[types.UID, createdSecret]

	// inFlight holds machines a worker of this operator is binding or has
	// just bound, until the cache shows their claimRef. Workers skip them, so
	// they neither race each other nor retry a machine the cache still shows
	// idle. The API server's resourceVersion check still decides every race
	// with other operators; this only avoids losing races to ourselves.
	inFlight reservations

	// expiryWarned holds, by claim UID, the end of the lifetime this
	// process has warned the claim's tenant of.
	expiryWarned base.Assumed[types.UID, time.Time]

	// retained counts, per namespace and class, the machines this operator
	// has just bound under Retain, for maxReleasedPerNamespace.
	retained retainLedger
}

// DefaultConnectionResync is how often a Ready claim's connection Secret is
// applied again by default.
const DefaultConnectionResync = 10 * time.Minute

func (r *Reconciler) connectionResync() time.Duration {
	if r.ConnectionResync > 0 {
		return r.ConnectionResync
	}
	return DefaultConnectionResync
}

// connectionDue says the claim's connection Secret was not applied by this
// process within ConnectionResync.
func (r *Reconciler) connectionDue(key types.NamespacedName, now time.Time) bool {
	// The resync is weighed as the record is read, not fixed when it was
	// made: a shorter ConnectionResync counts at once.
	_, at, applied := r.connectionApplied.Get(key, now)
	return !applied || now.Sub(at) >= r.connectionResync()
}

// now is the reconciler's clock's time; the real time without one.
func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}
