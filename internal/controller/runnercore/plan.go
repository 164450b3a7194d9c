package runnercore

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Why a runner is released before its job ended it; also the cleanups
// metric's reason.
const (
	CleanupRegistrationTimeout = "registration_timeout"
	CleanupJobTimeout          = "job_timeout"
	CleanupMacLost             = "mac_lost"
	CleanupSurplus             = "surplus"
	CleanupOrphan              = "orphan"
)

// Facts is what the reconcile knows of one runner: its claim, what
// the CI system said, and what its Mac's task did.
type Facts struct {
	Name     string
	Created  time.Time
	Deleting bool
	// Bound: the claim holds a Mac.
	Bound bool
	// Lost: the claim's Mac is gone (the claim's phase is Lost).
	Lost bool
	// Job is the job the CI system gave it, as it said or the claim records.
	Job *macvirtv1alpha1.RunnerJob
	// Result is its job's result once the CI system said the job ended.
	Result string
	// TaskEnded is the state of its runner task when the task ended (the
	// runner exited).
	TaskEnded macvirtv1alpha1.BootstrapState
	// Listed: the CI system's last list of its runners (agents) has it;
	// Online and Busy as listed.
	Listed, Online, Busy bool
}

// PlanInput is everything a plan is decided from.
type PlanInput struct {
	Now time.Time
	// Known: the demand is known now (for GitHub, the statistics of the
	// open session); without it nothing is released as surplus.
	Known bool
	// Held: the demand is not known now, and Assigned is what remains of
	// the jobs assigned when the CI system last said (a Hold): runners are
	// made for those, and none is released as surplus.
	Held bool
	// Assigned is the jobs that want a Mac, waiting or running.
	Assigned int
	// System names the CI system in runners' messages ("GitHub").
	System              string
	MaxRunners          int
	MinIdle             int
	OwnsPool            bool
	JobTimeout          time.Duration
	RegistrationTimeout time.Duration
	// RegistrationField names RegistrationTimeout's field in messages
	// (registrationTimeout when empty).
	RegistrationField string
	Runners           []Facts
}

// Decision is a runner's state and whether to release it now.
type Decision struct {
	macvirtv1alpha1.RunnerStatus
	// Release: remove its registration from the CI system and delete its
	// claim.
	Release bool
	// Cleanup is why it is released early (a cleanup metric reason); empty
	// when its job (or its runner's exit) ended it.
	Cleanup string
	created time.Time
}

// Plan is what to do.
type Plan struct {
	Runners []Decision
	// Desired is the assigned jobs up to maxRunners.
	Desired int
	// Create is how many runners to add.
	Create int
	// WarmIdle is the idle target of the set's own pool.
	WarmIdle int32
	// AtMax: more were wanted than maxRunners allows.
	AtMax bool
	// Held: the plan worked from held demand (PlanInput.Held).
	Held                              bool
	Pending, Idle, Running, Finishing int
}

// Decide is the runner set's one decision: each runner's state, which to
// release (finished, dead, timed out, or surplus when the CI system wants
// fewer),
// how many to create, and the warm pool's idle target. maxRunners bounds
// the runners that may take a job (provisioning, idle, running): a runner
// whose job is over is not one once its release began (its claim is being
// deleted), and a new job must not wait for its Mac's graceful stop, which
// may take minutes; that Mac holds its licence slot
// until it has stopped, and the slots, not this count, say when the new
// runner's Mac may start. So that a release that never ends cannot pile up
// claims, never more than MaxClaims(maxRunners) claims exist, finishing
// ones included. No runner that runs a job is released as surplus.
func Decide(in PlanInput) Plan {
	var p Plan
	p.Runners = make([]Decision, 0, len(in.Runners))
	for _, r := range in.Runners {
		p.Runners = append(p.Runners, classify(in, r))
	}
	active, releasing := 0, 0
	for _, d := range p.Runners {
		switch {
		case d.State != macvirtv1alpha1.RunnerFinishing:
			active++
		case d.Release:
			releasing++
		}
	}
	if in.Known || in.Held {
		p.Held = !in.Known
		p.Desired = min(in.Assigned, in.MaxRunners)
		p.AtMax = in.Assigned > in.MaxRunners
		if surplus := active - p.Desired; surplus > 0 && in.Known {
			releaseSurplus(&p, surplus, in.System)
			active -= surplus - remainingSurplus(p, surplus)
		}
		if want := p.Desired - active; want > 0 {
			// A runner this very plan releases still counts: what its
			// release does to the demand (a Buildkite job failed with it)
			// shows in the next plan, which its claim's deletion wakes.
			p.Create = max(0, min(want, in.MaxRunners-active-releasing, MaxClaims(in.MaxRunners)-len(in.Runners)))
		}
	}
	unbound := p.Create
	for i, d := range p.Runners {
		switch d.State {
		case macvirtv1alpha1.RunnerProvisioning:
			p.Pending++
			if !in.Runners[i].Bound {
				unbound++
			}
		case macvirtv1alpha1.RunnerIdle:
			p.Idle++
		case macvirtv1alpha1.RunnerRunning:
			p.Running++
		default:
			p.Finishing++
		}
	}
	if in.OwnsPool {
		p.WarmIdle = int32(min(in.MinIdle+unbound, in.MaxRunners)) //nolint:gosec // at most maxRunners, an int32.
	}
	return p
}

// MaxClaims is the most runner claims a set keeps, those of finished
// runners whose Macs are being released included: twice maxRunners.
func MaxClaims(maxRunners int) int { return 2 * maxRunners }

// classify says where one runner is and whether it is done.
func classify(in PlanInput, r Facts) Decision {
	d := Decision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: r.Name, Job: r.Job}, created: r.Created}
	since := func(t time.Time) *metav1.Time { mt := metav1.NewTime(t); return &mt }
	finish := func(cleanup, msg string) Decision {
		d.State, d.Message, d.Release, d.Cleanup = macvirtv1alpha1.RunnerFinishing, msg, !r.Deleting, cleanup
		return d
	}
	switch {
	case r.Deleting:
		return finish("", "its Mac is being released")
	case r.Result != "":
		job := "its job"
		if r.Job != nil {
			job = "job " + r.Job.ID
		}
		return finish("", fmt.Sprintf("%s completed: %s", job, r.Result))
	case r.TaskEnded != "":
		return finish("", fmt.Sprintf("the runner exited (%s)", r.TaskEnded))
	case r.Lost:
		return finish(CleanupMacLost, "its Mac was lost")
	case r.Job != nil || (r.Listed && r.Busy):
		d.State = macvirtv1alpha1.RunnerRunning
		if r.Job != nil && r.Job.StartedAt != nil {
			d.Since = r.Job.StartedAt.DeepCopy()
			if in.Now.Sub(r.Job.StartedAt.Time) > in.JobTimeout {
				return finish(CleanupJobTimeout, fmt.Sprintf("job %s ran longer than the set's jobTimeout (%s)", r.Job.ID, in.JobTimeout))
			}
		}
		return d
	case r.Listed && r.Online:
		d.State = macvirtv1alpha1.RunnerIdle
		return d
	}
	d.State, d.Since = macvirtv1alpha1.RunnerProvisioning, since(r.Created)
	switch {
	case in.Now.Sub(r.Created) > in.RegistrationTimeout:
		field := in.RegistrationField
		if field == "" {
			field = "registrationTimeout"
		}
		return finish(CleanupRegistrationTimeout, fmt.Sprintf("its runner did not come online within the set's %s (%s)", field, in.RegistrationTimeout))
	case !r.Bound:
		d.Message = "waiting for a Mac"
	default:
		d.Message = fmt.Sprintf("waiting for %s's runner to come online on the Mac", in.System)
	}
	return d
}

// releaseSurplus marks up to n runners that run no job for release:
// those not online first, then idle ones, newest first in each.
func releaseSurplus(p *Plan, n int, system string) {
	idx := make([]int, 0, len(p.Runners))
	for i, d := range p.Runners {
		if d.State == macvirtv1alpha1.RunnerProvisioning || d.State == macvirtv1alpha1.RunnerIdle {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		da, db := p.Runners[idx[a]], p.Runners[idx[b]]
		if da.State != db.State {
			return da.State == macvirtv1alpha1.RunnerProvisioning
		}
		return da.created.After(db.created)
	})
	for _, i := range idx[:min(n, len(idx))] {
		d := &p.Runners[i]
		d.State, d.Release, d.Cleanup = macvirtv1alpha1.RunnerFinishing, true, CleanupSurplus
		d.Message = system + " wants fewer runners: released before taking a job"
	}
}

// remainingSurplus is how much of n releaseSurplus could not release
// (runners running jobs are never surplus).
func remainingSurplus(p Plan, n int) int {
	released := 0
	for _, d := range p.Runners {
		if d.Cleanup == CleanupSurplus {
			released++
		}
	}
	return n - released
}
