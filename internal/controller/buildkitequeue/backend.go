package buildkitequeue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/buildkite/stacksapi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// bk is Buildkite as the runner core's backend for one reconcile of a
// queue: a Ready Mac is handed a reserved job and a job acquisition token.
// Nothing is registered for an agent before its Mac runs it, so releasing
// one removes nothing: a reservation or a token never used expires by
// itself and the job is scheduled again.
type bk struct {
	r *Reconciler
	s *queueScope
}

var _ runnercore.Backend = bk{}

// view is the queue as the runner core sees it.
func view(q *macvirtv1alpha1.MacBuildkiteQueue) runnercore.Set {
	return runnercore.Set{Object: q, Kind: "MacBuildkiteQueue", Label: macvirtv1alpha1.LabelBuildkiteQueue,
		System: "Buildkite", ServiceErrorReason: "BuildkiteError",
		ClassName: q.Spec.ClassName, PoolName: q.Spec.PoolName, MaxRunners: q.Spec.MaxAgents, MinIdle: q.Spec.MinIdle,
		JobTimeout: q.Spec.EffectiveJobTimeout(), RegistrationTimeout: q.Spec.EffectiveStartTimeout(),
		OwnedPool: ownedPoolName(q), PoolLabels: map[string]string{
			macvirtv1alpha1.LabelBuildkiteQueue: q.Name, macvirtv1alpha1.LabelBuildkiteQueueNamespace: q.Namespace}}
}

// agentScript starts buildkite-agent for the one job in the agent's job
// Secret; the agent registers with the job acquisition token, runs that
// job and exits.
func agentScript(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	path := q.Spec.Agent.Path
	if path == "" {
		path = macvirtv1alpha1.DefaultBuildkiteAgentPath
	}
	return fmt.Sprintf(`#!/bin/sh
# Buildkite agent of MacBuildkiteQueue %s/%s: acquires its one job, runs it, exits.
set -e
agent='%s'
case "$agent" in /*) ;; */*) agent="$HOME/$agent" ;; esac
exec "$agent" start --acquire-job "$BUILDKITE_AGENT_ACQUIRE_JOB"
`, q.Namespace, q.Name, path)
}

// Task runs buildkite-agent with the job and token of the agent's Secret,
// which appears once the Mac is Ready; until then the task waits for it.
func (b bk) Task(name string) macvirtv1alpha1.Bootstrap {
	q := b.s.Queue
	env := []macvirtv1alpha1.BootstrapEnvVar{
		{Name: "BUILDKITE_AGENT_ACQUIRE_JOB", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: name, Key: macvirtv1alpha1.BuildkiteJobKey}},
		{Name: "BUILDKITE_AGENT_TOKEN", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: name, Key: macvirtv1alpha1.BuildkiteJobTokenKey}},
		{Name: "BUILDKITE_AGENT_NAME", Value: name},
	}
	if ep := q.Spec.Buildkite.Endpoint; ep != "" {
		env = append(env, macvirtv1alpha1.BootstrapEnvVar{Name: "BUILDKITE_AGENT_ENDPOINT", Value: ep})
	}
	return macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: agentScript(q)}, Env: env, User: q.Spec.Agent.User}
}

// Hand gives a Ready Mac a job: it reserves a scheduled job for the
// token's life, issues the job acquisition token, writes both to the
// agent's Secret, and records the job on the claim last, so a claim with
// a job always has its Secret. A restarted operator finds the Secret and
// records the job from it.
func (b bk) Hand(ctx context.Context, c *macvirtv1alpha1.MacClaim, fresh bool) (bool, bool, error) {
	s, r := b.s, b.r
	if c.Status.Phase != macvirtv1alpha1.ClaimReady {
		return false, true, nil
	}
	if !fresh && !s.Poll.NoSecret[c.UID] {
		// Only this reconciler writes the Secret: once read missing, it
		// stays missing until Hand writes it.
		sec := &corev1.Secret{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, sec)
		if err == nil {
			job, ok := s.Poll.Handing[c.UID]
			if !ok {
				job = macvirtv1alpha1.RunnerJob{ID: string(sec.Data[macvirtv1alpha1.BuildkiteJobKey]), StartedAt: &sec.CreationTimestamp}
			}
			if err := b.record(ctx, c, job); err != nil {
				return false, false, err
			}
			delete(s.Poll.Handing, c.UID)
			return true, true, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, false, fmt.Errorf("reading the job Secret of claim %s/%s: %w", c.Namespace, c.Name, err)
		}
		s.Poll.noSecret(c.UID)
	}
	if s.Client == nil || !s.Poll.Known || s.Poll.Paused {
		return false, true, nil
	}
	ttl := s.Queue.Spec.EffectiveJobTokenTTL()
	for _, j := range s.Poll.Scheduled {
		if until, held := s.Poll.Reserved[j.ID]; s.Taken[j.ID] || (held && r.now().Before(until)) {
			continue
		}
		s.Taken[j.ID] = true
		reserved, err := s.Client.Reserve(ctx, []string{j.ID}, ttl)
		if err != nil {
			r.failed(s, err)
			return false, false, nil
		}
		if len(reserved) == 0 {
			continue // another stack took it, or it was cancelled
		}
		s.Poll.reserved(j.ID, r.now().Add(ttl))
		tok, err := s.Client.Issue(ctx, j.ID, ttl)
		if errors.Is(err, buildkite.ErrNotIssued) {
			continue
		}
		if err != nil {
			r.failed(s, err)
			return false, false, nil
		}
		now := metav1.NewTime(r.now())
		job := macvirtv1alpha1.RunnerJob{ID: j.ID, Repository: j.Pipeline.Slug, DisplayName: displayName(j), StartedAt: &now}
		if err := r.Create(ctx, jobSecret(c, j.ID, tok.Value)); err != nil && !apierrors.IsAlreadyExists(err) {
			s.Fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("creating the job Secret of agent %s: %v", c.Name, err))
			return false, false, fmt.Errorf("creating Secret %s/%s: %w", c.Namespace, c.Name, err)
		}
		delete(s.Poll.NoSecret, c.UID)
		if err := b.record(ctx, c, job); err != nil {
			// The Mac has its job: the plan counts it as handed, and the
			// next Hand finds the Secret and records it.
			s.Poll.handing(c.UID, job)
			return false, false, err
		}
		base.RecordEvent(r.Recorder, s.Queue, corev1.EventTypeNormal, "JobHanded", "Hand",
			fmt.Sprintf("agent %s (claim %s/%s) was handed job %s, its token valid until %s", c.Name, c.Namespace, c.Name, j.ID,
				tok.Expires.UTC().Format("15:04:05Z")))
		if d := s.Decision(c.Name); d != nil {
			d.State, d.Job, d.Since, d.Message = macvirtv1alpha1.RunnerRunning, &job, job.StartedAt, ""
			s.Plan.Pending, s.Plan.Running = s.Plan.Pending-1, s.Plan.Running+1
		}
		return true, true, nil
	}
	return false, true, nil
}

// displayName names a job by its pipeline, build and step, as far as
// Buildkite said them ("app #12 test").
func displayName(j stacksapi.ScheduledJob) string {
	var parts []string
	if j.Pipeline.Slug != "" {
		parts = append(parts, j.Pipeline.Slug)
	}
	if j.Build.Number > 0 {
		parts = append(parts, fmt.Sprintf("#%d", j.Build.Number))
	}
	if j.Step.Key != "" {
		parts = append(parts, j.Step.Key)
	}
	return strings.Join(parts, " ")
}

// record writes the job on the claim, if it is not there.
func (b bk) record(ctx context.Context, c *macvirtv1alpha1.MacClaim, job macvirtv1alpha1.RunnerJob) error {
	if jobOf(c) != nil {
		return nil
	}
	raw, err := json.Marshal(job)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(c.DeepCopy())
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[macvirtv1alpha1.AnnotationBuildkiteJob] = string(raw)
	if err := b.r.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
		b.s.Fail(macvirtv1alpha1.ReasonRunnerCleanup, fmt.Sprintf("recording job %s on claim %s: %v", job.ID, c.Name, err))
		return fmt.Errorf("recording job %s on claim %s/%s: %w", job.ID, c.Namespace, c.Name, err)
	}
	return nil
}

// Unregister removes nothing (see bk), but fails in Buildkite a job handed
// to the Mac whose agent never acquired it (the Mac lost, the agent
// missing or failing at start, the job outliving its timeout before it
// began), so the build says why instead of the job waiting out its
// reservation and going to another Mac that may fail the same way. A job
// the agent took is Buildkite's to end (it refuses with 422).
func (b bk) Unregister(ctx context.Context, name string) error {
	s := b.s
	c := s.Claim(name)
	if c == nil || s.Client == nil {
		return nil
	}
	job := jobOf(c)
	if handing, ok := s.Poll.Handing[c.UID]; job == nil && ok {
		job = &handing
	}
	if job == nil || (s.Poll.Asked[job.ID] && s.Poll.States[job.ID] != "scheduled") {
		return nil
	}
	why := "its Mac was released"
	if d := s.Decision(name); d != nil && d.Message != "" {
		why = d.Message
	}
	err := s.Client.Fail(ctx, job.ID, fmt.Sprintf("macvirt: agent %s did not take this job: %s (MacBuildkiteQueue %s/%s)",
		name, why, s.Queue.Namespace, s.Queue.Name))
	if err != nil && !buildkite.Refused(err) {
		b.r.failed(s, err)
	}
	delete(s.Poll.Handing, c.UID)
	return nil
}

// Forget has nothing to remove (see bk).
func (bk) Forget(context.Context, runnercore.Registration) (bool, error) { return false, nil }

// jobSecret holds one agent's job and job acquisition token, owned by its
// claim so it goes with it.
func jobSecret(claim *macvirtv1alpha1.MacClaim, job, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelBuildkiteQueue: claim.Labels[macvirtv1alpha1.LabelBuildkiteQueue]},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", claim.Name, claim.UID)}},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{macvirtv1alpha1.BuildkiteJobKey: job, macvirtv1alpha1.BuildkiteJobTokenKey: token},
	}
}

// release deletes the claims of finished, dead, timed-out or surplus
// agents, which stops their Macs gracefully.
func (r *Reconciler) release(ctx context.Context, s *queueScope) (bool, error) {
	return r.engine().Release(ctx, &s.Scope, bk{r, s})
}

// hand gives each Ready Mac still without a job one.
func (r *Reconciler) hand(ctx context.Context, s *queueScope) (bool, error) {
	return r.engine().Hand(ctx, &s.Scope, bk{r, s})
}

// create claims Macs for the jobs the plan asks for.
func (r *Reconciler) create(ctx context.Context, s *queueScope) (bool, error) {
	if s.Plan.Create == 0 || s.Client == nil {
		return true, nil
	}
	return r.engine().Create(ctx, &s.Scope, bk{r, s})
}

// ensureWarmPool keeps the queue's own pool at the planned idle target.
func (r *Reconciler) ensureWarmPool(ctx context.Context, s *queueScope) (bool, error) {
	return r.engine().EnsureWarmPool(ctx, &s.Scope)
}
