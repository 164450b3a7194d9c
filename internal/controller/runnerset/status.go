package runnerset

import (
	"fmt"
	"time"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// errorShown is how long an error GitHub answered stays in the status
// while the listener is in session again.
const errorShown = 10 * time.Minute

// computeRunnerSetStatus derives the set's counts, runners and conditions
// from its scope: the runner core's fleet status (its precedence of
// Ready's reason), with GitHub's own counts, its scale set and its last
// error around it.
func computeRunnerSetStatus(s *setScope, now time.Time) macvirtv1alpha1.MacRunnerSetStatus {
	set, d := s.Set, s.Demand
	assigned := d.Assigned
	if s.Plan.Held {
		// Kept, so that an operator started in the gap holds what remains.
		assigned = s.Assigned
	}
	st := macvirtv1alpha1.MacRunnerSetStatus{
		ScaleSetID:       set.Status.ScaleSetID,
		MessageSessionID: set.Status.MessageSessionID,
		AssignedJobs:     base.Int32(assigned),
		Runners:          base.Int32(len(s.Plan.Runners)),
		Idle:             base.Int32(s.Plan.Idle),
		RunnerStatuses:   runnercore.RunnerStatuses(s.Plan),
	}
	if d.ScaleSetID != 0 {
		st.ScaleSetID = int64(d.ScaleSetID)
	}
	if d.SessionID != "" {
		st.MessageSessionID = d.SessionID
	}
	if e := d.Err; e != nil && (!d.Listening || now.Sub(e.At) < errorShown) {
		st.LastGitHubError = runnercore.ServiceError(e.At, e.StatusCode, e.Message, e.RateLimit)
	}
	st.FleetStatus = runnercore.FleetStatus(&s.Scope, set.Generation, set.Status.Conditions, readiness(s, st.ScaleSetID))
	return st
}

// readiness is what the set's listener saw of GitHub, for Ready: while
// the session is closed, a refused credential (a human is needed), a rate
// limit, another listener's session or GitHub failing; the session being
// opened; and the set at maxRunners or listening.
func readiness(s *setScope, scaleSetID int64) runnercore.Readiness {
	set, d, p := s.Set, s.Demand, s.Plan
	name, url := set.EffectiveScaleSetName(), set.Spec.GitHub.URL
	r := runnercore.Readiness{
		Connected: d.Listening,
		Connecting: base.Problem{Reason: macvirtv1alpha1.ReasonConnecting,
			Message: fmt.Sprintf("registering scale set %q with %s and opening its message session", name, url)},
		AtMax: base.Problem{Reason: macvirtv1alpha1.ReasonAtMaxRunners,
			Message: fmt.Sprintf("%d jobs assigned and maxRunners is %d: %d jobs wait for a runner to finish", d.Assigned,
				set.Spec.MaxRunners, d.Assigned-int(set.Spec.MaxRunners))},
		Serving: base.Problem{Reason: macvirtv1alpha1.ReasonListening,
			Message: fmt.Sprintf("listening to scale set %q (id %d) of %s: %d jobs assigned, %d runners (%d pending, %d idle, %d running)",
				name, scaleSetID, url, d.Assigned, len(p.Runners), p.Pending, p.Idle, p.Running)},
	}
	if p.Held && d.Listening {
		r.Serving.Message += fmt.Sprintf("; GitHub's count is awaited: the set works from the %d jobs it held since GitHub was last heard", s.Assigned)
	}
	e := d.Err
	if e == nil || d.Listening {
		return r
	}
	reason := macvirtv1alpha1.ReasonGitHubUnavailable
	switch {
	case e.Credentials:
		r.Refused = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: e.Message}
		return r
	case e.RateLimit != nil:
		reason = macvirtv1alpha1.ReasonRateLimited
	case e.Conflict:
		reason = macvirtv1alpha1.ReasonSessionConflict
	}
	msg := e.Message
	if p.Held {
		msg += fmt.Sprintf("; meanwhile the set works from the %d jobs GitHub had assigned that have not ended: "+
			"runners are made for those, none is released as surplus, and new jobs wait for the session", s.Assigned)
	}
	r.Failing = &base.Problem{Reason: reason, Message: msg}
	return r
}
