package runnerset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/github"
)

// refreshRunners reads GitHub's list of the scale set's runners, at most
// once per resync, and removes those no claim backs.
func (r *Reconciler) refreshRunners(ctx context.Context, s *setScope) (bool, error) {
	c := s.Demand.Client
	if c == nil || s.Demand.ScaleSetID == 0 || r.now().Sub(s.Demand.RunnersAt) < r.resync() {
		return true, nil
	}
	runners, err := c.ListRunners(ctx, s.Set.EffectiveScaleSetName())
	if err != nil {
		r.githubFailed(s, c, err)
		return true, nil
	}
	r.Listeners.RecordRunners(s.Key, runners, r.now())
	s.Demand.Runners, s.Demand.RunnersAt = runners, r.now()
	claimed := map[string]bool{}
	for _, cl := range s.Claims {
		claimed[cl.Name] = true
	}
	for _, gr := range runners {
		if claimed[gr.Name] || !ownsName(s.Set, gr.Name) {
			continue
		}
		// Not in the cache: confirm with the API server, as a claim just
		// made may not be cached yet (its runner is registered after it).
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.Set.Namespace, Name: gr.Name}, &macvirtv1alpha1.MacClaim{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("confirming claim %s/%s is gone: %w", s.Set.Namespace, gr.Name, err)
		}
		gone, err := c.RemoveRunnerByID(ctx, gr.ID, gr.Name)
		switch {
		case errors.Is(err, github.ErrBusy):
			// Its Mac is gone; GitHub fails the job once the runner is
			// lost, and the next resync removes it.
		case err != nil:
			r.githubFailed(s, c, err)
		case gone:
			metrics.RunnerSetCleanups.WithLabelValues(s.Set.Namespace, s.Set.Name, cleanupOrphan).Inc()
			base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeNormal, "OrphanRunnerRemoved", "Cleanup",
				fmt.Sprintf("removed runner %s (id %d) from GitHub: no claim backs it", gr.Name, gr.ID))
		}
	}
	return true, nil
}

// plan decides from the facts.
func (r *Reconciler) plan(_ context.Context, s *setScope) (bool, error) {
	listed := map[string]github.Runner{}
	for _, gr := range s.Demand.Runners {
		listed[gr.Name] = gr
	}
	in := planInput{Now: r.now(), Known: s.Demand.Known && s.Blocked == nil, Assigned: s.Demand.Assigned,
		MaxRunners: int(s.Set.Spec.MaxRunners), MinIdle: int(s.Set.Spec.MinIdle), OwnsPool: ownsPool(s.Set),
		JobTimeout: s.Set.Spec.EffectiveJobTimeout(), RegistrationTimeout: s.Set.Spec.EffectiveRegistrationTimeout()}
	for i := range s.Claims {
		c := &s.Claims[i]
		f := runnerFacts{Name: c.Name, Created: c.CreationTimestamp.Time, Deleting: !c.DeletionTimestamp.IsZero(),
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
	s.Plan = decide(in)
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
			s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("recording job %s on claim %s: %v", job.ID, c.Name, err))
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
	c := s.Demand.Client
	for i := range s.Plan.Runners {
		d := &s.Plan.Runners[i]
		if !d.Release {
			continue
		}
		if c != nil {
			_, err := c.RemoveRunner(ctx, d.Name)
			switch {
			case errors.Is(err, github.ErrBusy) && d.Cleanup == cleanupSurplus:
				d.State, d.Release, d.Cleanup, d.Message = macvirtv1alpha1.RunnerRunning, false, "", "took a job as it was released"
				continue
			case errors.Is(err, github.ErrBusy):
				// Its job cannot go on (timed out, Mac lost): release the Mac;
				// the resync removes the runner once GitHub lets go of it.
			case err != nil:
				r.githubFailed(s, c, err)
				if d.Cleanup == cleanupSurplus {
					d.State, d.Release, d.Cleanup = macvirtv1alpha1.RunnerIdle, false, ""
					continue
				}
			}
		}
		claim := s.claim(d.Name)
		if err := r.Delete(ctx, claim, client.Preconditions{UID: &claim.UID}); err != nil && !apierrors.IsNotFound(err) {
			s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("releasing claim %s: %v", d.Name, err))
			return false, fmt.Errorf("releasing claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		r.jit.forget(claim.UID)
		if d.Cleanup != "" {
			metrics.RunnerSetCleanups.WithLabelValues(s.Set.Namespace, s.Set.Name, d.Cleanup).Inc()
			kind := corev1.EventTypeWarning
			if d.Cleanup == cleanupSurplus {
				kind = corev1.EventTypeNormal
			}
			base.RecordEvent(r.Recorder, s.Set, kind, "RunnerReleased", "Release", fmt.Sprintf("runner %s: %s", d.Name, d.Message))
		}
	}
	return true, nil
}

// ensureJIT registers a runner on GitHub for each claim that has no JIT
// Secret yet, and writes its configuration there for the Mac's task.
func (r *Reconciler) ensureJIT(ctx context.Context, s *setScope) (bool, error) {
	for i := range s.Claims {
		c := &s.Claims[i]
		if !c.DeletionTimestamp.IsZero() || r.jit.has(c.UID) {
			continue
		}
		if d := s.decision(c.Name); d == nil || d.State != macvirtv1alpha1.RunnerProvisioning {
			continue
		}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, &corev1.Secret{}); err == nil {
			r.jit.add(c.UID)
			continue
		} else if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("reading the JIT Secret of claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		if proceed, err := r.registerRunner(ctx, s, c); !proceed || err != nil {
			return proceed, err
		}
	}
	return true, nil
}

// registerRunner registers claim's runner and writes its JIT Secret.
func (r *Reconciler) registerRunner(ctx context.Context, s *setScope, c *macvirtv1alpha1.MacClaim) (bool, error) {
	gh := s.Demand.Client
	if gh == nil || s.Demand.ScaleSetID == 0 {
		return true, nil
	}
	jit, err := gh.GenerateJIT(ctx, s.Demand.ScaleSetID, c.Name)
	if err != nil {
		r.githubFailed(s, gh, err)
		return false, nil
	}
	if err := r.Create(ctx, jitSecret(c, jit)); err != nil && !apierrors.IsAlreadyExists(err) {
		s.fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("creating the JIT Secret of runner %s: %v", c.Name, err))
		return false, fmt.Errorf("creating Secret %s/%s: %w", c.Namespace, c.Name, err)
	}
	r.jit.add(c.UID)
	return true, nil
}

// create adds the runners the plan asks for: the claim first, then its
// registration on GitHub and its JIT Secret, so a runner on GitHub always
// has a claim to find it by, and an orphan can be told from a new runner.
func (r *Reconciler) create(ctx context.Context, s *setScope) (bool, error) {
	if s.Plan.Create == 0 || s.Demand.Client == nil || s.Demand.ScaleSetID == 0 {
		return true, nil
	}
	for i := 0; i < s.Plan.Create; i++ {
		c := runnerClaim(s.Set, runnerName(s.Set))
		if err := r.Create(ctx, c); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating a runner's claim: %v", err))
			base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeWarning, "ClaimRefused", "Create", err.Error())
			return false, nil
		}
		base.RecordEvent(r.Recorder, s.Set, corev1.EventTypeNormal, "RunnerCreated", "Create",
			fmt.Sprintf("claimed a Mac for runner %s: %d jobs assigned, %d runners", c.Name, s.Demand.Assigned, len(s.Claims)+i+1))
		s.Claims = append(s.Claims, *c)
		s.Plan.Runners = append(s.Plan.Runners, runnerDecision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: c.Name,
			State: macvirtv1alpha1.RunnerProvisioning, Message: "waiting for a Mac"}})
		s.Plan.Pending++
		if proceed, err := r.registerRunner(ctx, s, c); !proceed || err != nil {
			return proceed, err
		}
	}
	return true, nil
}
