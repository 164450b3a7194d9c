package runnerset

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// errorShown is how long an error GitHub answered stays in the status
// while the listener is in session again.
const errorShown = 10 * time.Minute

// computeRunnerSetStatus derives the set's counts, runners and conditions
// from its scope. Precedence of Ready's reason: what needs a human (the
// address, the credentials, the class), GitHub refusing or failing, the
// session not open yet, a write that failed, then maxRunners reached.
func computeRunnerSetStatus(s *setScope, now time.Time) macvirtv1alpha1.MacRunnerSetStatus {
	set := s.Set
	p := s.Plan
	st := macvirtv1alpha1.MacRunnerSetStatus{
		FleetStatus: macvirtv1alpha1.FleetStatus{
			ObservedGeneration: set.Generation,
			Desired:            base.Int32(p.Desired),
			Pending:            base.Int32(p.Pending),
			Running:            base.Int32(p.Running),
			Conditions:         append([]metav1.Condition(nil), set.Status.Conditions...),
		},
		ScaleSetID:   set.Status.ScaleSetID,
		AssignedJobs: base.Int32(s.Demand.Assigned),
		Runners:      base.Int32(len(p.Runners)),
		Idle:         base.Int32(p.Idle),
	}
	if s.Demand.ScaleSetID != 0 {
		st.ScaleSetID = int64(s.Demand.ScaleSetID)
	}
	if s.Pool != nil {
		st.WarmPoolName = s.Pool.Name
		if s.Pool.Spec.Idle != nil {
			st.WarmIdle = *s.Pool.Spec.Idle
		}
	}
	for _, d := range p.Runners {
		st.RunnerStatuses = append(st.RunnerStatuses, d.RunnerStatus)
	}
	sort.Slice(st.RunnerStatuses, func(i, j int) bool { return st.RunnerStatuses[i].Name < st.RunnerStatuses[j].Name })
	if e := s.Demand.Err; e != nil && (!s.Demand.Listening || now.Sub(e.At) < errorShown) {
		ge := &macvirtv1alpha1.ServiceError{Time: metav1.NewTime(e.At), StatusCode: base.Int32(e.StatusCode), Message: runnercore.Truncate(e.Message, 1024)}
		if e.RateLimit != nil {
			t := metav1.NewTime(*e.RateLimit)
			ge.RateLimitReset = &t
		}
		st.LastGitHubError = ge
	}

	var stalled *base.Problem
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, ObservedGeneration: set.Generation, Status: metav1.ConditionFalse}
	e := s.Demand.Err
	switch {
	case s.Blocked != nil:
		stalled = s.Blocked
		cond.Reason, cond.Message = s.Blocked.Reason, s.Blocked.Message
	case !s.Demand.Listening && e != nil && e.Credentials:
		stalled = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: e.Message}
		cond.Reason, cond.Message = stalled.Reason, stalled.Message
	case !s.Demand.Listening && e != nil && e.RateLimit != nil:
		cond.Reason, cond.Message = macvirtv1alpha1.ReasonRateLimited, e.Message
	case !s.Demand.Listening && e != nil && e.Conflict:
		cond.Reason, cond.Message = macvirtv1alpha1.ReasonSessionConflict, e.Message
	case !s.Demand.Listening && e != nil:
		cond.Reason, cond.Message = macvirtv1alpha1.ReasonGitHubUnavailable, e.Message
	case !s.Demand.Listening:
		cond.Reason = macvirtv1alpha1.ReasonConnecting
		cond.Message = fmt.Sprintf("registering scale set %q with %s and opening its message session", set.EffectiveScaleSetName(), set.Spec.GitHub.URL)
	case s.Failed != nil:
		cond.Reason, cond.Message = s.Failed.Reason, s.Failed.Message
	case p.AtMax:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonAtMaxRunners
		cond.Message = fmt.Sprintf("%d jobs assigned and maxRunners is %d: %d jobs wait for a runner to finish", s.Demand.Assigned,
			set.Spec.MaxRunners, s.Demand.Assigned-int(set.Spec.MaxRunners))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonListening
		cond.Message = fmt.Sprintf("listening to scale set %q (id %d) of %s: %d jobs assigned, %d runners (%d pending, %d idle, %d running)",
			set.EffectiveScaleSetName(), st.ScaleSetID, set.Spec.GitHub.URL, st.AssignedJobs, st.Runners, st.Pending, st.Idle, st.Running)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.SetStatusCondition(&st.Conditions, base.StalledCondition(set.Generation, stalled))
	return st
}
