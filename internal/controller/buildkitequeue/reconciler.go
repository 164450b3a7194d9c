package buildkitequeue

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// Reconciler keeps a Buildkite queue's agents: one claim per job up to the
// queue's scheduled jobs (never above maxAgents), each Mac handed one job
// once Ready and released after it.
type Reconciler struct {
	client.Client
	// APIReader reads the token and job Secrets (never cached: the
	// operator may read Secrets only where a namespace lets it).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// HTTP calls Buildkite (nil: a client with a 30 s timeout).
	HTTP *http.Client
	// Poll is how often a queue's scheduled jobs are read (default 5 s):
	// Buildkite tells a stack nothing, so this is how soon a new job is
	// seen.
	Poll           time.Duration
	ControllerName string

	handed runnercore.Record
	tokens runnercore.Secrets
	// polls is each queue's poll state, by queue: what Buildkite last
	// said, the stack's registration, the jobs reserved and waiting. It is
	// not a base.Assumed: no cache will ever show it (it is Buildkite's,
	// not the cluster's), it lives as long as the queue with nothing to
	// expire, and the queue's one worker changes it in place.
	mu    sync.Mutex
	polls map[types.NamespacedName]*poll
}

// engine is the runner core, doing its steps with this reconciler's
// clients.
func (r *Reconciler) engine() *runnercore.Engine {
	return &runnercore.Engine{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder,
		Cleanups: metrics.BuildkiteCleanups, Handed: &r.handed, Now: r.now()}
}

// pollOf is what the reconciler last learned of the queue key; a queue is
// reconciled by one worker at a time, so the record is its alone.
func (r *Reconciler) pollOf(key types.NamespacedName) *poll {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.polls == nil {
		r.polls = map[types.NamespacedName]*poll{}
	}
	p, ok := r.polls[key]
	if !ok {
		p = &poll{}
		r.polls[key] = p
	}
	return p
}

func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.polls, key)
}

// failed records an error Buildkite answered the reconcile with.
func (r *Reconciler) failed(s *queueScope, err error) {
	e := buildkite.Explain(err, tokenRef(s.Queue))
	s.Poll.Err = &problem{Explanation: e, At: r.now()}
	metrics.BuildkiteErrors.WithLabelValues(s.Queue.Namespace, s.Queue.Name, strconv.Itoa(e.StatusCode)).Inc()
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) pollEvery() time.Duration {
	if r.Poll <= 0 {
		return 5 * time.Second
	}
	return r.Poll
}

// tokenRef names where the queue's token is kept, for messages.
func tokenRef(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	return "Secret " + q.Namespace + "/" + q.Spec.Buildkite.TokenSecretName + " (key " + macvirtv1alpha1.BuildkiteTokenKey + ")"
}

// stackKey is the key of macvirt's stack for the queue: its namespace and
// name as far as Buildkite's 80 characters of A-Z, a-z, 0-9, _ and - allow
// (a dot of the name becomes _), and a hash of both, so that no two queues
// share a stack (team-a/ios-x and team-a-ios/x read alike) and each holds
// only its own reservations.
func stackKey(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	readable := strings.ReplaceAll("macvirt-"+q.Namespace+"-"+q.Name, ".", "_")
	return truncateName(readable, 80-9) + "-" + nameHash(q)
}

// ownedPoolName is the name of the queue's own warm pool (pools are
// cluster-scoped): readable, and the hash, so that no tenant can take
// another namespace's pool name first; at most the 52 characters a pool's
// name may have (its machines add a suffix).
func ownedPoolName(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	return truncateName("buildkite-"+q.Namespace+"-"+q.Name, 52-9) + "-" + nameHash(q)
}

// nameHash is 8 hex digits of the queue's namespace and name.
func nameHash(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	sum := sha256.Sum256([]byte(q.Namespace + "/" + q.Name))
	return hex.EncodeToString(sum[:4])
}

func truncateName(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-._")
}

// finalizer keeps a queue until its agents' Macs are released and its
// stack deregistered.
const finalizer = "macvirt.io/buildkite-queue"

// blockedRecheck is how soon a queue that needs a human looks again.
const blockedRecheck = time.Minute
