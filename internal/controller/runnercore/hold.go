package runnercore

import macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"

// Hold is the demand a set works from while its CI system cannot tell it
// (for GitHub: while the scale set's message session is not answering, in
// an outage or while a dead operator's session has yet to expire). It
// starts from the jobs assigned when the CI system last said, and each of
// those jobs leaves with the runner that ran it: a JIT runner runs one job
// and exits. So the set replaces runners for jobs still held and makes none
// once the held jobs are done.
type Hold struct {
	// From is the jobs assigned when the hold began.
	From int
	// Runners are the runners Held has seen, by name.
	Runners map[string]HoldRole
}

// HoldRole is what a runner is to a hold.
type HoldRole int8

const (
	// HoldBefore means the runner was finishing when the hold began; it took no held job.
	HoldBefore HoldRole = iota
	// HoldActive means the runner may run a held job.
	HoldActive
	// HoldEnded means the runner ended, and a held job with it.
	HoldEnded
)

// Remaining is the held jobs no runner has ended with yet.
func (h Hold) Remaining() int {
	ended := 0
	for _, r := range h.Runners {
		if r == HoldEnded {
			ended++
		}
	}
	return max(0, h.From-ended)
}

// StartHold begins a hold of from jobs, from the runners as the set's
// status last showed them (with the count from was read with): one that
// was finishing then took no held job; any other may run one.
func StartHold(from int, shown []macvirtv1alpha1.RunnerStatus) Hold {
	h := Hold{From: from, Runners: make(map[string]HoldRole, len(shown))}
	for _, r := range shown {
		if r.State == macvirtv1alpha1.RunnerFinishing {
			h.Runners[r.Name] = HoldBefore
		} else {
			h.Runners[r.Name] = HoldActive
		}
	}
	return h
}

// Held follows h over the runners now. A runner it has not seen joins it
// (one made during the hold). One of its runners that is finishing or gone
// ended with one held job. A runner that ended without a job (it never
// came online, its Mac was lost before it took one) is counted too, which
// errs on the side of a job waiting for the CI system rather than a runner
// without a job. Held does not change h; it returns the hold to keep.
func Held(h Hold, runners []Facts) Hold {
	out := Hold{From: h.From, Runners: make(map[string]HoldRole, len(h.Runners)+len(runners))}
	for name, role := range h.Runners {
		if role == HoldActive {
			role = HoldEnded // unless it is still there, below
		}
		out.Runners[name] = role
	}
	for _, r := range runners {
		ended := r.Deleting || r.Result != "" || r.TaskEnded != "" || r.Lost
		role, seen := h.Runners[r.Name]
		switch {
		case !seen && ended:
			out.Runners[r.Name] = HoldEnded
		case !seen, role == HoldActive && !ended:
			out.Runners[r.Name] = HoldActive
		}
	}
	return out
}
