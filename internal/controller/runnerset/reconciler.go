package runnerset

import (
	"time"

	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"

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

	// handed remembers the claims whose JIT Secret exists.
	handed runnercore.Record
	// creds are the credentials Secrets last read.
	creds runnercore.Secrets
}

// githubFailed records an error GitHub answered the reconcile with.
func (r *Reconciler) githubFailed(s *setScope, c *github.Client, err error) {
	p := Problem{Explanation: c.Explain(err), At: r.now()}
	r.Listeners.RecordError(s.Key, p)
	s.Demand.Err = &p
}

// engine is the runner core, doing its steps with this reconciler's
// clients.
func (r *Reconciler) engine() *runnercore.Engine {
	return &runnercore.Engine{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder,
		Cleanups: metrics.RunnerSetCleanups, Handed: &r.handed, Now: r.now()}
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) resync() time.Duration {
	if r.Resync <= 0 {
		return 15 * time.Second
	}
	return r.Resync
}

// finalizer keeps a set until its runners are released and removed from
// GitHub, and its scale set with them.
const finalizer = "macvirt.io/runner-set"

// busyRecheck is how soon a set with runners or jobs looks again: for
// timeouts and GitHub's runner list, which no event announces.
const busyRecheck = 10 * time.Second

// quietRecheck is how soon a set with nothing to do looks again, for
// orphans left on GitHub.
const quietRecheck = time.Minute
