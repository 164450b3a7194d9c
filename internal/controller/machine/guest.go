package machine

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// guestState is what the guest agent's heartbeats say.
type guestState struct {
	cond         base.Condition
	recheckAfter time.Duration
}

// observeGuest maps the last heartbeat to GuestAgentReady. A heartbeat from
// before the current boot does not count. Boot and heartbeat timeouts run
// from the later of the event and the moment the agent endpoint began to
// listen: a guest is never condemned for the operator's own absence (a
// rescheduled, crashed or upgraded operator pod).
func observeGuest(o machineObservation, since *metav1.Time) guestState {
	if since == nil || o.Class == nil {
		return guestState{cond: base.CondFalse(macvirtv1alpha1.ReasonPending, "VM not running")}
	}
	lc := o.Class.Spec.Lifecycle
	var last *metav1.Time
	if g := o.Machine.Status.Guest; g != nil {
		last = g.LastHeartbeat
	}
	if o.Class.Spec.Installer != nil {
		// A person installs macOS over VNC; no agent is expected, and
		// one installed meanwhile changes nothing.
		return guestState{cond: base.Condition{Status: metav1.ConditionTrue, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonInstaller,
			Message: "installer machine: no guest agent is expected; install macOS over VNC (virtctl vnc " + o.Machine.Name + " -n " +
				o.Machine.Namespace + "), then the agent package, and capture it with a MacImage"}}}
	}
	if last == nil || last.Before(since) {
		from, note := since.Time, ""
		if o.ListeningSince.After(from) {
			from, note = o.ListeningSince, fmt.Sprintf(" (counted from %s, when the agent endpoint began to listen)",
				o.ListeningSince.UTC().Format(time.RFC3339))
		}
		waited := o.Now.Sub(from)
		if waited >= lc.BootTimeoutOrDefault() {
			return guestState{cond: base.CondFalse(macvirtv1alpha1.ReasonBootTimeout,
				"no guest-agent heartbeat %s after the VM started%s (bootTimeout %s): macOS may be stuck at the OpenCore picker or a kernel panic",
				waited.Round(time.Second), note, lc.BootTimeoutOrDefault())}
		}
		return guestState{
			cond: base.CondFalse(macvirtv1alpha1.ReasonBooting, "VM running; waiting for the first guest-agent heartbeat (bootTimeout %s)",
				lc.BootTimeoutOrDefault()),
			recheckAfter: lc.BootTimeoutOrDefault() - waited,
		}
	}
	// Messages name fixed times, not ages, so an unchanged machine keeps an
	// unchanged status and a reconcile writes nothing.
	timeout := lc.HeartbeatTimeoutOrDefault()
	if last.Time.Before(o.ListeningSince) {
		// A guest already judged silent stays so until it is heard: a
		// restart must not turn a hung Mac back into a bindable one.
		if c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionGuestAgentReady); c != nil &&
			c.Status == metav1.ConditionFalse && c.Reason == macvirtv1alpha1.ReasonHeartbeatStale {
			return guestState{cond: base.Condition{Status: metav1.ConditionFalse, Problem: base.Problem{Reason: c.Reason, Message: c.Message}}}
		}
		// The guest may have been heartbeating into a closed endpoint; it
		// gets a full heartbeatTimeout from when the endpoint opened.
		waited := o.Now.Sub(o.ListeningSince)
		if waited >= timeout {
			return guestState{cond: base.CondFalse(macvirtv1alpha1.ReasonHeartbeatStale,
				"guest agent silent since %s, and for heartbeatTimeout %s after the agent endpoint began to listen at %s",
				last.UTC().Format(time.RFC3339), timeout, o.ListeningSince.UTC().Format(time.RFC3339))}
		}
		return guestState{
			cond: base.CondTrue(fmt.Sprintf("last heartbeat at %s, before the agent endpoint began to listen at %s; the guest has heartbeatTimeout %s from then to report",
				last.UTC().Format(time.RFC3339), o.ListeningSince.UTC().Format(time.RFC3339), timeout)),
			recheckAfter: timeout - waited,
		}
	}
	// The endpoint writes a steady guest's heartbeat about every other
	// interval: the beats it heard but did not write came less than the
	// gap of the interval recorded after the recorded one (a beat answered
	// with another interval is written), so silence is judged from there,
	// whatever the class's timeout became since.
	var told time.Duration
	if g := o.Machine.Status.Guest; g != nil {
		told = time.Duration(g.HeartbeatIntervalSeconds) * time.Second
	}
	age := o.Now.Sub(last.Time) - guestprotocol.HeartbeatRecordGap(told)
	if age >= timeout {
		return guestState{cond: base.CondFalse(macvirtv1alpha1.ReasonHeartbeatStale,
			"guest agent silent for longer than heartbeatTimeout %s (last heartbeat written at %s)", timeout, last.UTC().Format(time.RFC3339))}
	}
	return guestState{
		cond:         base.CondTrue(fmt.Sprintf("guest agent heartbeats within heartbeatTimeout %s", timeout)),
		recheckAfter: timeout - age,
	}
}
