package buildkitequeue

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// computeBuildkiteQueueStatus derives the queue's counts, agents and
// conditions from its scope. Precedence of Ready's reason: what needs a
// human (the token Secret, the class, a token Buildkite refuses), Buildkite
// failing, the stack not registered or polled yet, a write that failed,
// then maxAgents reached.
func computeBuildkiteQueueStatus(s *queueScope) macvirtv1alpha1.MacBuildkiteQueueStatus {
	q := s.Queue
	p := s.Plan
	st := macvirtv1alpha1.MacBuildkiteQueueStatus{
		FleetStatus: macvirtv1alpha1.FleetStatus{
			ObservedGeneration: q.Generation,
			Desired:            base.Int32(p.Desired),
			Pending:            base.Int32(p.Pending),
			Running:            base.Int32(p.Running),
			Conditions:         append([]metav1.Condition(nil), q.Status.Conditions...),
		},
		StackKey: q.Status.StackKey,
		Jobs:     base.Int32(s.Assigned),
		Agents:   base.Int32(len(p.Runners)),
	}
	if s.Poll.Registered {
		st.StackKey = stackKey(q)
	}
	if s.Pool != nil {
		st.WarmPoolName = s.Pool.Name
		if s.Pool.Spec.Idle != nil {
			st.WarmIdle = *s.Pool.Spec.Idle
		}
	}
	for _, d := range p.Runners {
		st.AgentStatuses = append(st.AgentStatuses, d.RunnerStatus)
	}
	sort.Slice(st.AgentStatuses, func(i, j int) bool { return st.AgentStatuses[i].Name < st.AgentStatuses[j].Name })
	e := s.Poll.Err
	if e != nil {
		st.LastBuildkiteError = &macvirtv1alpha1.ServiceError{Time: metav1.NewTime(e.At), StatusCode: base.Int32(e.StatusCode), Message: runnercore.Truncate(e.Message, 1024)}
	}

	var stalled *base.Problem
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, ObservedGeneration: q.Generation, Status: metav1.ConditionFalse}
	known := s.Poll.Known && s.Poll.Registered
	switch {
	case s.Blocked != nil:
		stalled = s.Blocked
		cond.Reason, cond.Message = s.Blocked.Reason, s.Blocked.Message
	case !known && e != nil && e.Credentials:
		stalled = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: e.Message}
		cond.Reason, cond.Message = stalled.Reason, stalled.Message
	case e != nil:
		cond.Reason, cond.Message = macvirtv1alpha1.ReasonBuildkiteUnavailable, e.Message
	case !known:
		cond.Reason = macvirtv1alpha1.ReasonConnectingBuildkite
		cond.Message = fmt.Sprintf("registering stack %q on queue %q and reading its scheduled jobs", stackKey(q), q.Spec.Buildkite.Queue)
	case s.Failed != nil:
		cond.Reason, cond.Message = s.Failed.Reason, s.Failed.Message
	case p.AtMax:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonAtMaxAgents
		cond.Message = fmt.Sprintf("%d jobs want a Mac and maxAgents is %d: %d wait for an agent to finish", s.Assigned,
			q.Spec.MaxAgents, s.Assigned-int(q.Spec.MaxAgents))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonPolling
		cond.Message = fmt.Sprintf("stack %q polls queue %q: %d jobs want a Mac, %d agents (%d pending, %d running)",
			st.StackKey, q.Spec.Buildkite.Queue, st.Jobs, st.Agents, st.Pending, st.Running)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.SetStatusCondition(&st.Conditions, base.StalledCondition(q.Generation, stalled))
	return st
}
