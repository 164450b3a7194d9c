package gitlab

import (
	"fmt"
	"time"

	"gitlab.com/gitlab-org/fleeting/fleeting/provider"
	"k8s.io/apimachinery/pkg/api/meta"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Labels and annotations the plugin puts on its claims.
const (
	// LabelGroup names the instance group (the plugin's "name" setting)
	// a claim belongs to; the plugin lists its claims by it.
	LabelGroup = "fleeting.macvirt.io/group"
	// AnnotationKey identifies the plugin process whose key pair the
	// claim's public key belongs to (a digest, never key material). A
	// claim made by an earlier process cannot be logged in to by this one.
	AnnotationKey = "fleeting.macvirt.io/key-id"
	// AnnotationProcess identifies the plugin process that made the claim
	// (random per process: processes sharing a static key are told apart).
	AnnotationProcess = "fleeting.macvirt.io/process"
)

// process is a plugin process: its random id and its key pair's id.
type process struct{ id, keyID string }

// verdict is what the runner's autoscaler is told of one claim, and
// whether the plugin releases the claim itself.
type verdict struct {
	state provider.State
	// release: the claim can never serve a job (its Mac was lost, its
	// lifetime ended, or no key this process holds opens it); the plugin
	// deletes it and reports it deleting, so nothing is left behind.
	release bool
	// foreign: the claim is another live plugin process's (one with the
	// same name in the same namespace, a misconfiguration): neither
	// reported nor touched.
	foreign bool
	// why says, for the log, why the claim is released or still waits.
	why string
}

// owner is the plugin process that made a claim: its process annotation,
// or for a claim made before processes were named, its key id.
func owner(c *macvirtv1alpha1.MacClaim) string {
	if p := c.Annotations[AnnotationProcess]; p != "" {
		return p
	}
	return "key:" + c.Annotations[AnnotationKey]
}

// judge decides one claim's verdict; self is this process (its process id,
// and "key:"+its key id for claims made before processes were named),
// started when it started, and running the processes of the group whose
// Lease says they run.
func judge(c *macvirtv1alpha1.MacClaim, self process, started time.Time, running map[string]bool) verdict {
	key, by := c.Annotations[AnnotationKey], owner(c)
	mine := by == self.id || by == "key:"+self.keyID
	switch {
	case !mine && !c.CreationTimestamp.Time.Before(started.Truncate(time.Second)):
		return verdict{foreign: true, why: fmt.Sprintf("made by another plugin process of this name after this one started (process %q, this one's %q): give each runner's plugin a name of its own", by, self.id)}
	case !mine && running[by]:
		return verdict{foreign: true, why: fmt.Sprintf("made by an earlier plugin process (%q) that still runs (its Lease is renewed): its Macs, and the jobs on them, are its own until it stops", by)}
	case c.DeletionTimestamp != nil:
		return verdict{state: provider.StateDeleting, why: "released, its Mac stopping"}
	case !mine:
		return verdict{state: provider.StateDeleting, release: true,
			why: fmt.Sprintf("made by an earlier plugin process (%q, key %q) that no longer runs: no job may land on a Mac its runner may have touched", by, key)}
	case c.Status.Phase.Ended():
		return verdict{state: provider.StateDeleting, release: true, why: "the claim is " + string(c.Status.Phase) + ": " + readyMessage(c)}
	case c.Status.Phase == macvirtv1alpha1.ClaimReady && c.Status.Connection != nil && c.Status.Connection.Address != "":
		return verdict{state: provider.StateRunning}
	}
	why := "waiting for a Ready Mac (phase " + string(c.Status.Phase) + ")"
	if st := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionStalled); st != nil && st.Status == "True" {
		why = "stalled: " + st.Message
	}
	return verdict{state: provider.StateCreating, why: why}
}

// readyMessage is the claim's Ready condition's message, or its phase.
func readyMessage(c *macvirtv1alpha1.MacClaim) string {
	if r := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady); r != nil && r.Message != "" {
		return r.Message
	}
	return "phase " + string(c.Status.Phase)
}
