package bootstrap

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Plan is the parts a binding of claim runs, in order, all Pending: the
// class's bootstrap, then the claim's. The claim controller records it
// when the claim is first bound, so a class changed afterwards adds no
// part to a Mac already handed out.
func Plan(class *macvirtv1alpha1.MacClass, claim *macvirtv1alpha1.MacClaim) []macvirtv1alpha1.BootstrapPartStatus {
	var parts []macvirtv1alpha1.BootstrapPartStatus
	if class != nil && class.Spec.Bootstrap != nil {
		parts = append(parts, pending(macvirtv1alpha1.BootstrapPartClass, class.Spec.Bootstrap.HoldsReady()))
	}
	if claim.Spec.Bootstrap != nil {
		parts = append(parts, pending(macvirtv1alpha1.BootstrapPartClaim, claim.Spec.Bootstrap.HoldsReady()))
	}
	return parts
}

// pending is a part not taken yet.
func pending(name string, holdReady bool) macvirtv1alpha1.BootstrapPartStatus {
	return macvirtv1alpha1.BootstrapPartStatus{Name: name, HoldReady: holdReady,
		TaskOutcome: macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapPending}}
}

// Spec is the bootstrap a part runs: the class's or the claim's.
func Spec(part string, class *macvirtv1alpha1.MacClass, claim *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.Bootstrap {
	switch {
	case part == macvirtv1alpha1.BootstrapPartClass && class != nil:
		return class.Spec.Bootstrap
	case part == macvirtv1alpha1.BootstrapPartClaim:
		return claim.Spec.Bootstrap
	}
	return nil
}

// TaskID is the agent's id of a part of claim's binding.
func TaskID(claimUID types.UID, part string) string {
	return guestprotocol.TaskID(string(claimUID), part)
}

// Observe is parts with each unfinished part's state as the machine's
// guest status has it (by task id): what the agent reported, or the
// endpoint's word on why it could not hand the part over yet (Pending with
// a message). A part the agent took never goes back to Pending: one that
// ran stays as it was last seen while nothing is reported (it is never
// handed over again), and a finished one stays as it is.
func Observe(parts []macvirtv1alpha1.BootstrapPartStatus, claimUID types.UID, guest *macvirtv1alpha1.GuestStatus) []macvirtv1alpha1.BootstrapPartStatus {
	out := make([]macvirtv1alpha1.BootstrapPartStatus, 0, len(parts))
	for _, p := range parts {
		p := *p.DeepCopy()
		t := reported(guest, TaskID(claimUID, p.Name))
		switch {
		case p.State.Finished(), t == nil && p.State == macvirtv1alpha1.BootstrapRunning:
		case t == nil:
			p = pending(p.Name, p.HoldReady)
		case t.State == macvirtv1alpha1.BootstrapPending && p.State == macvirtv1alpha1.BootstrapRunning:
			// The endpoint's word cannot undo what the agent said.
		default:
			p.TaskOutcome = *t.TaskOutcome.DeepCopy()
		}
		out = append(out, p)
	}
	return out
}

func reported(guest *macvirtv1alpha1.GuestStatus, id string) *macvirtv1alpha1.GuestTaskStatus {
	if guest == nil {
		return nil
	}
	for i := range guest.Tasks {
		if guest.Tasks[i].ID == id {
			return &guest.Tasks[i]
		}
	}
	return nil
}

// Summary is what the parts come to for the claim.
type Summary struct {
	// Status, Reason and Message are BootstrapSucceeded's.
	Status          metav1.ConditionStatus
	Reason, Message string
	// HoldsReady says Ready waits: a part that holds Ready has not
	// succeeded.
	HoldsReady bool
	// Warning says the bootstrap failed (or cannot run): the claim's
	// tenant hears it as a Warning event when it turns so.
	Warning bool
}

// Summarize says what parts come to on a machine whose agent speaks
// protocolVersion; ok is false when there are no parts (no condition).
func Summarize(parts []macvirtv1alpha1.BootstrapPartStatus, protocolVersion string) (Summary, bool) {
	if len(parts) == 0 {
		return Summary{}, false
	}
	holds := false
	for _, p := range parts {
		if p.HoldReady && p.State != macvirtv1alpha1.BootstrapSucceeded {
			holds = true
		}
	}
	s := Summary{Status: metav1.ConditionFalse, HoldsReady: holds}
	for i, p := range parts {
		switch p.State {
		case macvirtv1alpha1.BootstrapSucceeded:
			continue
		case macvirtv1alpha1.BootstrapFailed, macvirtv1alpha1.BootstrapTimedOut:
			s.Reason, s.Warning = string(p.State), true
			s.Message = fmt.Sprintf("the %s's bootstrap %s%s", p.Name, failure(p), later(parts[i+1:]))
			return s, true
		case macvirtv1alpha1.BootstrapRunning:
			s.Reason = macvirtv1alpha1.ReasonBootstrapRunning
			s.Message = fmt.Sprintf("the %s's bootstrap is running", p.Name)
			if p.StartedAt != nil {
				s.Message += " since " + p.StartedAt.UTC().Format(time.RFC3339)
			}
			return s, true
		}
		// Pending.
		switch {
		case protocolVersion == guestprotocol.Version:
			s.Reason, s.Warning = macvirtv1alpha1.ReasonAgentTooOld, true
			s.Message = "the machine's guest agent speaks protocol v1 and runs no bootstrap; " +
				"the class's golden image needs an agent of protocol v2 (docs/bootstrap.md)"
		case p.Message != "":
			s.Reason = macvirtv1alpha1.ReasonBootstrapSourceUnavailable
			s.Message = fmt.Sprintf("the %s's bootstrap cannot be handed to the agent: %s", p.Name, p.Message)
		default:
			s.Reason = macvirtv1alpha1.ReasonBootstrapPending
			s.Message = fmt.Sprintf("waiting for the guest agent to take the %s's bootstrap", p.Name)
		}
		return s, true
	}
	s.Status, s.Reason = metav1.ConditionTrue, macvirtv1alpha1.ReasonBootstrapSucceeded
	names := make([]string, 0, len(parts))
	for _, p := range parts {
		names = append(names, p.Name+"'s")
	}
	s.Message = "the " + strings.Join(names, " and the ") + " bootstrap succeeded"
	return s, true
}

// failure says how a part failed.
func failure(p macvirtv1alpha1.BootstrapPartStatus) string {
	msg := "failed"
	if p.State == macvirtv1alpha1.BootstrapTimedOut {
		msg = "timed out"
	}
	switch {
	case p.Message != "":
		msg += ": " + p.Message
	case p.ExitCode != nil:
		msg += fmt.Sprintf(": exit status %d", *p.ExitCode)
	}
	if p.Duration != nil {
		msg += fmt.Sprintf(" after %s", p.Duration.Round(time.Millisecond))
	}
	return msg + "; kubectl mac logs shows the end of its output"
}

// later says what became of the parts after a failed one: they never run.
func later(rest []macvirtv1alpha1.BootstrapPartStatus) string {
	if len(rest) == 0 {
		return ""
	}
	return fmt.Sprintf("; the %s's bootstrap does not run", rest[0].Name)
}

// Next is the part the agent is handed now: the first one not finished,
// when every part before it succeeded; none once one failed.
func Next(parts []macvirtv1alpha1.BootstrapPartStatus) (macvirtv1alpha1.BootstrapPartStatus, bool) {
	for _, p := range parts {
		switch p.State {
		case macvirtv1alpha1.BootstrapSucceeded:
			continue
		case macvirtv1alpha1.BootstrapFailed, macvirtv1alpha1.BootstrapTimedOut:
			return macvirtv1alpha1.BootstrapPartStatus{}, false
		}
		return p, true
	}
	return macvirtv1alpha1.BootstrapPartStatus{}, false
}
