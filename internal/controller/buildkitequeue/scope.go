package buildkitequeue

import (
	"time"

	"github.com/buildkite/stacksapi"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// queueScope is what one reconcile of a queue read, decided and failed to
// do.
type queueScope struct {
	// Scope is the runner core's part: claims, plan, what blocked (the
	// token Secret, the class) and what failed.
	runnercore.Scope
	Queue *macvirtv1alpha1.MacBuildkiteQueue
	Key   types.NamespacedName
	// Client talks to Buildkite as the queue's stack, once the token is
	// read.
	Client *buildkite.Client
	// Poll is what the queue's last poll of Buildkite saw.
	Poll *poll
	// Taken are the jobs handed to an agent of the queue in this
	// reconcile or before, by job id.
	Taken map[string]bool
	// TokenSum tells tokens apart without keeping one: a new token
	// registers the stack again.
	TokenSum string
}

// poll is what the reconciler last learned of a queue from Buildkite.
type poll struct {
	// Config is what the stack was registered with; a change registers
	// it again.
	Config string
	// Registered: the stack is registered with Config; TriedAt is when
	// it was last registered or tried.
	Registered bool
	TriedAt    time.Time
	// At is when the scheduled jobs were last read; Known whether that
	// read succeeded.
	At    time.Time
	Known bool
	// Scheduled are the queue's scheduled jobs no stack holds reserved;
	// Paused says the cluster queue is paused in Buildkite.
	Scheduled []stacksapi.ScheduledJob
	Paused    bool
	// Reserved are the jobs this process reserved, until their
	// reservations end: Buildkite lets a stack reserve a job it holds
	// again, and a claim's record of its job may not be in the cache yet.
	Reserved map[string]time.Time
	// Handing are the jobs whose Secret was written and whose record on
	// the claim failed, by claim: the plan counts them as handed until
	// the record is written.
	Handing map[types.UID]macvirtv1alpha1.RunnerJob
	// States are the states of the jobs handed to the queue's agents,
	// Asked the jobs the poll asked about (those handed before it).
	States map[string]string
	Asked  map[string]bool
	// Err is the last error Buildkite answered, cleared by a good poll.
	Err *problem
	// WaitingSince is since when, without a break, a scheduled job has
	// had no agent of the queue; zero when none waits.
	WaitingSince time.Time
	// NoSecret are the Ready claims whose job Secret was read missing.
	NoSecret map[types.UID]bool
}

func (p *poll) reserved(job string, until time.Time) {
	if p.Reserved == nil {
		p.Reserved = map[string]time.Time{}
	}
	p.Reserved[job] = until
}

func (p *poll) handing(uid types.UID, job macvirtv1alpha1.RunnerJob) {
	if p.Handing == nil {
		p.Handing = map[types.UID]macvirtv1alpha1.RunnerJob{}
	}
	p.Handing[uid] = job
}

func (p *poll) noSecret(uid types.UID) {
	if p.NoSecret == nil {
		p.NoSecret = map[types.UID]bool{}
	}
	p.NoSecret[uid] = true
}

// problem is an error from Buildkite, explained, and when it happened.
type problem struct {
	buildkite.Explanation
	At time.Time
}
