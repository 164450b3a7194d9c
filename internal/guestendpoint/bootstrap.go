package guestendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/bootstrap"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// bootstrap is what a heartbeat of the machine bound to claim gets and
// records of the claim's bootstrap: the agent's reports of the binding's
// parts (those of other bindings are dropped; reported is what the
// heartbeat carries, or, for a watch, what status.guest recorded of the
// last one, where a part not handed over is Pending), and the part the agent is
// handed next (bootstrap.Next), once the agent has not reported it yet.
// A part that cannot be handed over (a Secret the operator may not read,
// a class that no longer allows it) is recorded as Pending with the reason,
// and tried again with the next heartbeat. Secrets' values go only into
// the answer, never into what is recorded.
func (h *Handler) bootstrap(ctx context.Context, claim *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass,
	reported []macvirtv1alpha1.GuestTaskStatus) ([]guestprotocol.Task, []macvirtv1alpha1.GuestTaskStatus, error) {
	parts := claim.Status.Bootstrap
	if len(parts) == 0 {
		return nil, nil, nil
	}
	byID := map[string]macvirtv1alpha1.GuestTaskStatus{}
	for _, r := range reported {
		byID[r.ID] = r
	}
	var recorded []macvirtv1alpha1.GuestTaskStatus
	for _, p := range parts {
		if r, ok := byID[bootstrap.TaskID(claim.UID, p.Name)]; ok && r.State != macvirtv1alpha1.BootstrapPending {
			recorded = append(recorded, r)
		}
	}
	guest := &macvirtv1alpha1.GuestStatus{Tasks: recorded}
	next, ok := bootstrap.Next(bootstrap.Observe(parts, claim.UID, guest))
	id := bootstrap.TaskID(claim.UID, next.Name)
	if r, taken := byID[id]; !ok || (taken && r.State != macvirtv1alpha1.BootstrapPending) || next.State != macvirtv1alpha1.BootstrapPending {
		// Nothing to hand over, or a part the agent took (one it no longer
		// reports is never handed again: it ran, or may have).
		return nil, recorded, nil
	}
	pending := func(msg string) ([]guestprotocol.Task, []macvirtv1alpha1.GuestTaskStatus, error) {
		return nil, append(recorded, macvirtv1alpha1.GuestTaskStatus{ID: id, TaskOutcome: macvirtv1alpha1.TaskOutcome{
			State: macvirtv1alpha1.BootstrapPending, Message: guestprotocol.Truncate(msg, macvirtv1alpha1.MaxBootstrapMessageBytes)}}), nil
	}
	spec := bootstrap.Spec(next.Name, class, claim)
	if spec == nil {
		return pending("the class's bootstrap was removed after the claim was bound; delete the claim to get a Mac without it")
	}
	if next.Name == macvirtv1alpha1.BootstrapPartClaim {
		if r := tenancy.Bootstrap(class, spec); r != nil {
			return pending(r.Message)
		}
	}
	reader := h.Sources
	if reader == nil {
		reader = h.Client
	}
	task, err := bootstrap.Task(ctx, reader, claim.Namespace, id, spec)
	var unavailable *bootstrap.Unavailable
	switch {
	case errors.As(err, &unavailable):
		return pending(unavailable.Message)
	case err != nil:
		return nil, nil, err
	}
	if raw, err := json.Marshal(task); err != nil || len(raw) > maxTaskBytes {
		return pending(fmt.Sprintf("the bootstrap comes to %d bytes as the agent receives it, more than the %d an answer carries; "+
			"make its files smaller", len(raw), maxTaskBytes))
	}
	return []guestprotocol.Task{task}, recorded, nil
}

// maxTaskBytes bounds a task as sent, leaving room in the agent's answer
// (guestprotocol.MaxAnswerBytesV2) for the rest of it.
const maxTaskBytes = guestprotocol.MaxAnswerBytesV2 - 512<<10

// guestTasks are a heartbeat's task reports as status.guest records them.
func guestTasks(reports []guestprotocol.TaskReport) []macvirtv1alpha1.GuestTaskStatus {
	var out []macvirtv1alpha1.GuestTaskStatus
	for _, r := range reports {
		out = append(out, guestTask(r))
	}
	return out
}

// guestTask is a task report as status.guest records it, its output and
// message without the escape sequences and control characters (but
// newlines and tabs) a terminal would act on (guestprotocol.Printable): the
// claim's bootstrap status and kubectl mac logs show them.
func guestTask(r guestprotocol.TaskReport) macvirtv1alpha1.GuestTaskStatus {
	t := macvirtv1alpha1.GuestTaskStatus{ID: r.ID, TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapState(r.State),
		OutputTail: guestprotocol.Printable(r.OutputTail), Message: guestprotocol.Printable(r.Message)}}
	if !r.StartedAt.IsZero() {
		// At the API's precision (seconds), so the next report of the same
		// task reads as unchanged.
		at := metav1.NewTime(r.StartedAt.Truncate(time.Second))
		t.StartedAt = &at
	}
	if r.ExitCode != nil {
		code := int32(*r.ExitCode) //nolint:gosec // exit statuses are small.
		t.ExitCode = &code
	}
	if t.State.Finished() {
		t.Duration = &metav1.Duration{Duration: msDuration(r.DurationMillis)}
	}
	return t
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
