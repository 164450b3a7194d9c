package runnercore

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// maxServiceMessage is the longest message of a CI service's error a
// status carries: the service's words can be long (a whole HTML page).
const maxServiceMessage = 1024

// Readiness is what a fleet kind saw of its CI service, in the kind's own
// reasons and words, for the Ready condition Ready decides. The kind sets
// Refused and Failing only when they should take Ready (GitHub's errors
// count only while its session is closed; any error of Buildkite's
// counts); the core orders them.
type Readiness struct {
	// Refused is the service refusing the fleet's credentials: a human is
	// needed, so the fleet is Stalled.
	Refused *base.Problem
	// Failing is the service failing or refusing to serve for now (down,
	// rate-limited, a session held elsewhere); it is retried.
	Failing *base.Problem
	// Connected: the fleet is registered with the service and knows its
	// demand (a scale set's session is open, a stack is registered and
	// polled).
	Connected bool
	// Connecting is Ready's reason and message while not connected.
	Connecting base.Problem
	// AtMax is Ready's reason and message (True) when more jobs want a Mac
	// than the fleet's maximum allows.
	AtMax base.Problem
	// Serving is Ready's reason and message (True) when all is well.
	Serving base.Problem
}

// Ready decides a fleet's Ready condition and what stalls the fleet (nil
// when no human is needed). The first that holds wins: the reconcile was
// blocked (the address, the credentials Secret, the class: Stalled), the
// service refused the credentials (Stalled), the service is failing, the
// fleet is not connected yet, a write or call of this reconcile failed,
// more jobs want a Mac than the maximum (Ready all the same), or it
// serves.
func Ready(s *Scope, r Readiness) (ready base.Condition, stalled *base.Problem) {
	notReady := func(p base.Problem) base.Condition { return base.Condition{Status: metav1.ConditionFalse, Problem: p} }
	switch {
	case s.Blocked != nil:
		return notReady(*s.Blocked), s.Blocked
	case r.Refused != nil:
		return notReady(*r.Refused), r.Refused
	case r.Failing != nil:
		return notReady(*r.Failing), nil
	case !r.Connected:
		return notReady(r.Connecting), nil
	case s.Failed != nil:
		return notReady(*s.Failed), nil
	case s.Plan.AtMax:
		return base.Condition{Status: metav1.ConditionTrue, Problem: r.AtMax}, nil
	}
	return base.Condition{Status: metav1.ConditionTrue, Problem: r.Serving}, nil
}

// FleetStatus is the status every fleet kind shares, computed from the
// core's part of the reconcile: the plan's counts, the warm pool, and
// Ready and Stalled as Ready decides them from r, set on a copy of the
// conditions the object had (generation is the object's). A kind adds
// its own fields around it.
func FleetStatus(s *Scope, generation int64, had []metav1.Condition, r Readiness) macvirtv1alpha1.FleetStatus {
	st := macvirtv1alpha1.FleetStatus{
		ObservedGeneration: generation,
		Desired:            base.Int32(s.Plan.Desired),
		Pending:            base.Int32(s.Plan.Pending),
		Running:            base.Int32(s.Plan.Running),
		Conditions:         append([]metav1.Condition(nil), had...),
	}
	if s.Pool != nil {
		st.WarmPoolName = s.Pool.Name
		if s.Pool.Spec.Idle != nil {
			st.WarmIdle = *s.Pool.Spec.Idle
		}
	}
	ready, stalled := Ready(s, r)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: ready.Status,
		Reason: ready.Reason, Message: ready.Message, ObservedGeneration: generation})
	meta.SetStatusCondition(&st.Conditions, base.StalledCondition(generation, stalled))
	return st
}

// RunnerStatuses are the plan's runners as a status lists them: sorted by
// name, so a status that did not change compares equal; nil when there
// are none.
func RunnerStatuses(p Plan) []macvirtv1alpha1.RunnerStatus {
	var st []macvirtv1alpha1.RunnerStatus
	for _, d := range p.Runners {
		st = append(st, d.RunnerStatus)
	}
	sort.Slice(st, func(i, j int) bool { return st[i].Name < st[j].Name })
	return st
}

// ServiceError is an error the CI service answered at at, as a status
// carries it: the HTTP status (0 without an answer), the message cut to
// maxServiceMessage bytes, and when the rate limit resets if that was the
// cause (nil otherwise).
func ServiceError(at time.Time, statusCode int, message string, rateLimitReset *time.Time) *macvirtv1alpha1.ServiceError {
	e := &macvirtv1alpha1.ServiceError{Time: metav1.NewTime(at), StatusCode: base.Int32(statusCode),
		Message: truncate(message, maxServiceMessage)}
	if rateLimitReset != nil {
		t := metav1.NewTime(*rateLimitReset)
		e.RateLimitReset = &t
	}
	return e
}

// truncate cuts s to n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
