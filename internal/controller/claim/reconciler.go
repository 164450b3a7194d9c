package claim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/classhistory"
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
	connectionApplied sync.Map

	// assumed holds the machines this process has just bound, by claim,
	// until the claims' status records them.
	assumed assumed

	// namespaceServices holds the namespaces whose headless Service this
	// process has just made, or found someone else's, for a while.
	namespaceServices seenRecently

	// secrets holds the connection Secrets this process created, by claim,
	// until the claims' status records them.
	secrets createdSecrets

	// inFlight holds machines a worker of this operator is binding or has
	// just bound, until the cache shows their claimRef. Workers skip them, so
	// they neither race each other nor retry a machine the cache still shows
	// idle. The API server's resourceVersion check still decides every race
	// with other operators; this only avoids losing races to ourselves.
	inFlight reservations

	// expiryWarned holds, by claim UID, the end of the lifetime this
	// process has warned the claim's tenant of.
	expiryWarned sync.Map

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
	at, ok := r.connectionApplied.Load(key)
	return !ok || now.Sub(at.(time.Time)) >= r.connectionResync()
}

// now is the reconciler's clock's time; the real time without one.
func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}
