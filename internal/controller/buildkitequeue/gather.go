package buildkitequeue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/buildkite/stacksapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
)

// loadToken reads the queue's agent token and makes its Buildkite client.
func (r *Reconciler) loadToken(ctx context.Context, s *queueScope) (bool, error) {
	q := s.Queue
	key := types.NamespacedName{Namespace: q.Namespace, Name: q.Spec.Buildkite.TokenSecretName}
	sec, err := r.tokens.Get(ctx, r.APIReader, r.now(), key)
	switch {
	case apierrors.IsNotFound(err):
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid,
			Message: fmt.Sprintf("spec.buildkite.tokenSecretName: Secret %s does not exist; create it with a cluster agent token under %q (docs/buildkite.md)",
				key, macvirtv1alpha1.BuildkiteTokenKey)}
		return true, nil
	case apierrors.IsForbidden(err):
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
			"spec.buildkite.tokenSecretName: the operator may not read Secrets in namespace %s; bind the ClusterRole "+
				"macvirt-bootstrap-source-reader to its service account there (docs/buildkite.md): %v", q.Namespace, err)}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	token := strings.TrimSpace(string(sec.Data[macvirtv1alpha1.BuildkiteTokenKey]))
	if token == "" {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonCredentialsInvalid, Message: fmt.Sprintf(
			"spec.buildkite.tokenSecretName: Secret %s has no %q key; put a cluster agent token of the queue's cluster there",
			key, macvirtv1alpha1.BuildkiteTokenKey)}
		return true, nil
	}
	sum := sha256.Sum256([]byte(token))
	s.TokenSum = hex.EncodeToString(sum[:8])
	c, err := buildkite.New(q.Spec.Buildkite.Endpoint, token, stackKey(q), q.Spec.Buildkite.Queue, r.HTTP)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonBuildkiteUnavailable, Message: "spec.buildkite.endpoint: " + err.Error()}
		return true, nil
	}
	s.Client = c
	return true, nil
}

// connect registers the queue's stack with Buildkite, again when the
// queue or the token changed or a poll failed (the stack may be gone: a
// deregistration elsewhere), at most once per poll interval.
func (r *Reconciler) connect(ctx context.Context, s *queueScope) (bool, error) {
	if s.Client == nil || s.Blocked != nil {
		return true, nil
	}
	config := strings.Join([]string{s.Client.Stack, s.Client.Queue, s.Queue.Spec.Buildkite.Endpoint, string(s.Queue.UID), s.TokenSum}, "\x00")
	if s.Poll.Registered && s.Poll.Config == config {
		return true, nil
	}
	if r.now().Sub(s.Poll.TriedAt) < r.pollEvery() && s.Poll.Config == config {
		return true, nil
	}
	s.Poll.Registered, s.Poll.Known, s.Poll.Config, s.Poll.TriedAt = false, false, config, r.now()
	err := s.Client.Register(ctx, map[string]string{"macvirt.io/namespace": s.Queue.Namespace, "macvirt.io/queue": s.Queue.Name})
	if err != nil {
		r.failed(s, err)
		return true, nil
	}
	s.Poll.Registered = true
	return true, nil
}

// listClaims reads the queue's agents' claims.
func (r *Reconciler) listClaims(ctx context.Context, s *queueScope) (bool, error) {
	if _, err := r.engine().ListClaims(ctx, &s.Scope); err != nil {
		return false, err
	}
	for i := range s.Claims {
		if job := jobOf(&s.Claims[i]); job != nil {
			s.Taken[job.ID] = true
		}
	}
	return true, nil
}

// refresh reads the queue's scheduled jobs and the states of the agents'
// jobs, at most once per poll interval.
func (r *Reconciler) refresh(ctx context.Context, s *queueScope) (bool, error) {
	if s.Client == nil || s.Blocked != nil || !s.Poll.Registered || r.now().Sub(s.Poll.At) < r.pollEvery() {
		return true, nil
	}
	s.Poll.At = r.now()
	limit := int(s.Queue.Spec.MaxAgents) + len(s.Claims)
	queue, err := s.Client.Scheduled(ctx, limit)
	if err != nil {
		r.failed(s, err)
		s.Poll.Known, s.Poll.Registered = false, false
		return true, nil
	}
	for id, until := range s.Poll.Reserved {
		if !r.now().Before(until) {
			delete(s.Poll.Reserved, id)
		}
	}
	var handed []string
	for id := range s.Taken {
		handed = append(handed, id)
	}
	states := map[string]string{}
	if len(handed) > 0 {
		if states, err = s.Client.States(ctx, handed); err != nil {
			r.failed(s, err)
			s.Poll.Known, s.Poll.Registered = false, false
			return true, nil
		}
	}
	asked := make(map[string]bool, len(handed))
	for _, id := range handed {
		asked[id] = true
	}
	s.Poll.Scheduled, s.Poll.Paused, s.Poll.States, s.Poll.Asked, s.Poll.Known, s.Poll.Err = queue.Jobs, queue.Paused, states, asked, true, nil
	waits := waiting(queue.Jobs, s.Taken)
	if queue.Paused {
		waits = 0 // held in Buildkite on purpose
	}
	s.Poll.WaitingSince = waitingSince(s.Poll.WaitingSince, waits, s.Poll.At)
	return true, nil
}

// plan decides from the facts.
func (r *Reconciler) plan(_ context.Context, s *queueScope) (bool, error) {
	q := s.Queue
	wanted := map[string]bool{}
	for _, j := range s.Poll.Scheduled {
		if !s.Poll.Paused {
			wanted[j.ID] = true
		}
	}
	in := runnercore.PlanInput{Now: r.now(), Known: s.Poll.Known && s.Blocked == nil, System: s.Of.System,
		MaxRunners: int(q.Spec.MaxAgents), MinIdle: int(q.Spec.MinIdle), OwnsPool: s.Of.OwnsPool(),
		JobTimeout: q.Spec.EffectiveJobTimeout(), RegistrationTimeout: q.Spec.EffectiveStartTimeout(), RegistrationField: "startTimeout"}
	for i := range s.Claims {
		c := &s.Claims[i]
		f := runnercore.Facts{Name: c.Name, Created: c.CreationTimestamp.Time, Deleting: !c.DeletionTimestamp.IsZero(),
			Bound: c.Status.MachineRef != nil, Lost: c.Status.Phase.Ended(), Job: jobOf(c)}
		if job, ok := s.Poll.Handing[c.UID]; ok && f.Job == nil {
			f.Job = &job
		}
		if f.Job != nil {
			f.Result = result(s.Poll, f.Job.ID)
			if f.Result == "" && !f.Deleting {
				wanted[f.Job.ID] = true
			}
		}
		for _, part := range c.Status.Bootstrap {
			if part.Name == macvirtv1alpha1.BootstrapPartClaim && part.State.Finished() {
				f.TaskEnded = part.State
			}
		}
		in.Runners = append(in.Runners, f)
	}
	in.Assigned = len(wanted)
	s.Assigned, s.Plan = in.Assigned, runnercore.Decide(in)
	return true, nil
}

// result is how a handed job ended, as the last poll saw it: its state
// once it no longer needs the Mac, or that Buildkite does not know it
// (asked about and not answered); empty while it runs or was handed after
// the poll.
func result(p *poll, job string) string {
	if !p.Known || !p.Asked[job] {
		return ""
	}
	state, known := p.States[job]
	switch {
	case !known:
		return "unknown to Buildkite"
	case ended(state):
		return state
	}
	return ""
}

// waiting counts the scheduled jobs no agent of the queue holds.
func waiting(jobs []stacksapi.ScheduledJob, taken map[string]bool) int {
	n := 0
	for _, j := range jobs {
		if !taken[j.ID] {
			n++
		}
	}
	return n
}

// waitingSince is since when jobs have waited without a break: kept while
// they still wait, started now when they begin to, zero once none waits.
func waitingSince(since time.Time, waiting int, now time.Time) time.Time {
	switch {
	case waiting == 0:
		return time.Time{}
	case since.IsZero():
		return now
	}
	return since
}

// ended reports whether a job in Buildkite's state no longer needs its
// Mac: only the states Buildkite ends a job in; one it may add later keeps
// the Mac until the job timeout.
func ended(state string) bool {
	switch state {
	case "finished", "canceled", "timed_out", "skipped", "broken", "expired":
		return true
	}
	return false
}

// jobOf is the job recorded on claim, if any.
func jobOf(c *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.RunnerJob {
	raw := c.Annotations[macvirtv1alpha1.AnnotationBuildkiteJob]
	if raw == "" {
		return nil
	}
	var job macvirtv1alpha1.RunnerJob
	if json.Unmarshal([]byte(raw), &job) != nil || job.ID == "" {
		return nil
	}
	return &job
}
