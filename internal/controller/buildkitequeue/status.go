package buildkitequeue

import (
	"fmt"
	"time"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// computeBuildkiteQueueStatus derives the queue's counts, agents and
// conditions from its scope: the runner core's fleet status (its
// precedence of Ready's reason), with the queue's jobs, agents, stack and
// Buildkite's last error around it.
func computeBuildkiteQueueStatus(s *queueScope) macvirtv1alpha1.MacBuildkiteQueueStatus {
	q := s.Queue
	st := macvirtv1alpha1.MacBuildkiteQueueStatus{
		StackKey:      q.Status.StackKey,
		Jobs:          base.Int32(s.Assigned),
		Agents:        base.Int32(len(s.Plan.Runners)),
		AgentStatuses: runnercore.RunnerStatuses(s.Plan),
	}
	if s.Poll.Registered {
		st.StackKey = stackKey(q)
	}
	if e := s.Poll.Err; e != nil {
		var reset *time.Time
		if e.RateLimitReset > 0 {
			t := e.At.Add(e.RateLimitReset)
			reset = &t
		}
		st.LastBuildkiteError = runnercore.ServiceError(e.At, e.StatusCode, e.Message, reset)
	}
	st.FleetStatus = runnercore.FleetStatus(&s.Scope, q.Generation, q.Status.Conditions, readiness(s, st.StackKey))
	return st
}

// readiness is what the queue's polls saw of Buildkite, for Ready: a
// token refused before the stack was registered and polled (a human is
// needed), Buildkite failing at any time, the stack being registered; and
// the queue at maxAgents or polling.
func readiness(s *queueScope, key string) runnercore.Readiness {
	q, p := s.Queue, s.Plan
	known := s.Poll.Known && s.Poll.Registered
	r := runnercore.Readiness{
		Connected: known,
		Connecting: base.Problem{Reason: macvirtv1alpha1.ReasonConnectingBuildkite,
			Message: fmt.Sprintf("registering stack %q on queue %q and reading its scheduled jobs", stackKey(q), q.Spec.Buildkite.Queue)},
		AtMax: base.Problem{Reason: macvirtv1alpha1.ReasonAtMaxAgents,
			Message: fmt.Sprintf("%d jobs want a Mac and maxAgents is %d: %d wait for an agent to finish", s.Assigned,
				q.Spec.MaxAgents, s.Assigned-int(q.Spec.MaxAgents))},
		Serving: base.Problem{Reason: macvirtv1alpha1.ReasonPolling,
			Message: fmt.Sprintf("stack %q polls queue %q: %d jobs want a Mac, %d agents (%d pending, %d running)",
				key, q.Spec.Buildkite.Queue, s.Assigned, len(p.Runners), p.Pending, p.Running)},
	}
	switch e := s.Poll.Err; {
	case e != nil && !known && e.Credentials:
		r.Refused = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: e.Message}
	case e != nil:
		r.Failing = &base.Problem{Reason: macvirtv1alpha1.ReasonBuildkiteUnavailable, Message: e.Message}
	}
	return r
}
