package runnerset

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

// refreshRunners reads GitHub's list of the scale set's runners, at most
// once per resync, and removes those no claim backs.
func (r *Reconciler) refreshRunners(ctx context.Context, s *setScope) (bool, error) {
	c := s.Demand.Client
	if c == nil || s.Demand.ScaleSetID == 0 || r.now().Sub(s.Demand.RunnersAt) < r.resync() {
		return true, nil
	}
	runners, err := c.ListRunners(ctx, s.Set.EffectiveScaleSetName(), func(name string) bool { return runnercore.OwnsName(s.Set.Name, name) })
	if err != nil {
		r.githubFailed(s, c, err)
		return true, nil
	}
	r.Listeners.RecordRunners(s.Key, runners, r.now())
	s.Demand.Runners, s.Demand.RunnersAt = runners, r.now()
	listed := make([]runnercore.Registration, 0, len(runners))
	for _, gr := range runners {
		listed = append(listed, runnercore.Registration{ID: gr.ID, Name: gr.Name})
	}
	if err := r.engine().ForgetLeaked(ctx, &s.Scope, r.backend(s), listed); err != nil {
		return false, err
	}
	return true, nil
}

// plan decides from the facts: GitHub's assigned jobs while its session
// answers, else the jobs held from when it last did (Listeners.Hold).
func (r *Reconciler) plan(_ context.Context, s *setScope) (bool, error) {
	listed := map[string]github.Runner{}
	for _, gr := range s.Demand.Runners {
		listed[gr.Name] = gr
	}
	in := runnercore.PlanInput{Now: r.now(), Known: s.Demand.Known && s.Blocked == nil, Assigned: s.Demand.Assigned, System: s.Of.System,
		MaxRunners: int(s.Set.Spec.MaxRunners), MinIdle: int(s.Set.Spec.MinIdle), OwnsPool: s.Of.OwnsPool(),
		JobTimeout: s.Set.Spec.EffectiveJobTimeout(), RegistrationTimeout: s.Set.Spec.EffectiveRegistrationTimeout()}
	for i := range s.Claims {
		c := &s.Claims[i]
		f := runnercore.Facts{Name: c.Name, Created: c.CreationTimestamp.Time, Deleting: !c.DeletionTimestamp.IsZero(),
			Bound: c.Status.MachineRef != nil, Lost: c.Status.Phase.Ended(), Result: s.Demand.Completed[c.Name]}
		if job, ok := s.Demand.Started[c.Name]; ok {
			f.Job = &job
		} else if raw := c.Annotations[macvirtv1alpha1.AnnotationRunnerJob]; raw != "" {
			var job macvirtv1alpha1.RunnerJob
			if json.Unmarshal([]byte(raw), &job) == nil {
				f.Job = &job
			}
		}
		for _, part := range c.Status.Bootstrap {
			if part.Name == macvirtv1alpha1.BootstrapPartClaim && part.State.Finished() {
				f.TaskEnded = part.State
			}
		}
		if gr, ok := listed[c.Name]; ok {
			f.Listed, f.Online, f.Busy = true, gr.Online, gr.Busy
		}
		in.Runners = append(in.Runners, f)
	}
	if !in.Known && s.Blocked == nil {
		in.Assigned, in.Held = r.Listeners.Hold(s.Key, int(s.Set.Status.AssignedJobs), s.Set.Status.RunnerStatuses, in.Runners)
	}
	s.Assigned, s.Plan = in.Assigned, runnercore.Decide(in)
	return true, nil
}

// recordJobs writes on each claim the job GitHub gave its runner, so a
// restarted operator knows which runners run jobs.
func (r *Reconciler) recordJobs(ctx context.Context, s *setScope) (bool, error) {
	for i := range s.Claims {
		c := &s.Claims[i]
		job, ok := s.Demand.Started[c.Name]
		if !ok || c.Annotations[macvirtv1alpha1.AnnotationRunnerJob] != "" || !c.DeletionTimestamp.IsZero() {
			continue
		}
		raw, err := json.Marshal(job)
		if err != nil {
			return false, err
		}
		patch := client.MergeFrom(c.DeepCopy())
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[macvirtv1alpha1.AnnotationRunnerJob] = string(raw)
		if err := r.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
			s.Fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("recording job %s on claim %s: %v", job.ID, c.Name, err))
			return false, err
		}
	}
	return true, nil
}

// release removes each finished, dead, timed-out or surplus runner from
// GitHub and deletes its claim, which stops its Mac gracefully. A surplus
// runner GitHub says runs a job is kept.
func (r *Reconciler) release(ctx context.Context, s *setScope) (bool, error) {
	present := map[string]bool{}
	for i := range s.Claims {
		present[s.Claims[i].Name] = true
	}
	var gone []string
	for name := range s.Demand.Started {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	for name := range s.Demand.Completed {
		if !present[name] {
			gone = append(gone, name)
		}
	}
	r.Listeners.Forget(s.Key, gone...)
	return r.engine().Release(ctx, &s.Scope, r.backend(s))
}

// ensureJIT registers a runner on GitHub for each claim that has no JIT
// Secret yet, and writes its configuration there for the Mac's task.
func (r *Reconciler) ensureJIT(ctx context.Context, s *setScope) (bool, error) {
	return r.engine().Hand(ctx, &s.Scope, r.backend(s))
}

// create adds the runners the plan asks for, each registered on GitHub
// once its claim exists.
func (r *Reconciler) create(ctx context.Context, s *setScope) (bool, error) {
	if s.Plan.Create == 0 || s.Demand.Client == nil || s.Demand.ScaleSetID == 0 {
		return true, nil
	}
	return r.engine().Create(ctx, &s.Scope, r.backend(s))
}

// ensureWarmPool keeps the set's own pool at the planned idle target.
func (r *Reconciler) ensureWarmPool(ctx context.Context, s *setScope) (bool, error) {
	return r.engine().EnsureWarmPool(ctx, &s.Scope)
}
