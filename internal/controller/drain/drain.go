// Package drain decides, purely, what a drain of an Apple node means for
// a machine. Every VM is rendered with evictionStrategy External, so when
// a drain evicts its virt-launcher pod virt-api refuses the eviction (429)
// and marks the instance for evacuation (status.evacuationNodeName), and
// no KubeVirt controller acts on it: the machine controller does, by
// Observe. An unbound machine is stopped gracefully at once (its pool
// deletes and replaces it); a bound one keeps running for its tenant,
// HostDraining, until its claim releases it or the class's
// drainGracePeriod ends, and is then stopped gracefully. Once its instance
// is gone the mark goes with it, and a machine that should run starts
// again, on another node: the drained one is cordoned. Nothing is ever
// killed, and the drain finishes when the last instance is gone. The pool
// reads a machine's drain from its status (NodeOf), and a claim mirrors
// it for its tenant (Mirror).
package drain

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// State is what the machine's instance says about a drain.
type State struct {
	// Node is the node being drained; "" when the instance is not marked.
	Node string
	// Since is when the machine first saw the mark (its HostDraining
	// condition's transition), so the grace survives operator restarts.
	Since time.Time
	// Grace is the class's drainGracePeriod, Bound whether a claim holds
	// the machine.
	Grace time.Duration
	Bound bool
	// Stop is true once the machine is to be stopped for the drain;
	// RecheckAfter is when it will be, while it is not yet.
	Stop         bool
	RecheckAfter time.Duration
}

// Input is what a drain decision reads: the machine, its class (nil when
// unknown), its instance (nil when none) and the time.
type Input struct {
	Now      time.Time
	Machine  *macvirtv1alpha1.MacMachine
	Class    *macvirtv1alpha1.MacClass
	VMI      *kubevirtv1.VirtualMachineInstance
	Deleting bool
}

// Observe maps the instance's evacuation mark to the drain decision.
func Observe(o Input) State {
	vmi := o.VMI
	if vmi == nil || vmi.Status.EvacuationNodeName == "" || vmi.IsFinal() || o.Deleting {
		return State{}
	}
	d := State{Node: vmi.Status.EvacuationNodeName, Since: o.Now, Bound: o.Machine.Spec.ClaimRef != nil}
	if c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionHostDraining); c != nil &&
		c.Status == metav1.ConditionTrue && !c.LastTransitionTime.After(o.Now) {
		d.Since = c.LastTransitionTime.Time
	}
	if o.Class != nil {
		d.Grace = o.Class.Spec.Lifecycle.DrainGracePeriodOrDefault()
	}
	if !d.Bound {
		d.Stop = true
		return d
	}
	if wait := d.Since.Add(d.Grace).Sub(o.Now); wait > 0 {
		d.RecheckAfter = wait
		return d
	}
	d.Stop = true
	return d
}

// HostDraining is the machine's HostDraining condition while its
// node drains; ok is false when there is none.
func HostDraining(d State) (base.Condition, bool) {
	if d.Node == "" {
		return base.Condition{}, false
	}
	c := base.Condition{Status: metav1.ConditionTrue}
	// KubeVirt marks the instance on any eviction of its pod: kubectl
	// drain, but also the descheduler or its own workload updater, which
	// do not cordon the node.
	what := fmt.Sprintf("node %s is being drained (its virt-launcher pod was evicted: kubectl drain, the descheduler or a KubeVirt workload update)", d.Node)
	switch {
	case !d.Bound:
		c.Problem = base.Problem{Reason: macvirtv1alpha1.ReasonDrainStop, Message: what +
			": the machine is idle, so macOS is shut down gracefully now and the machine replaced"}
	case d.Stop:
		c.Problem = base.Problem{Reason: macvirtv1alpha1.ReasonDrainStop, Message: fmt.Sprintf(
			"%s and drainGracePeriod (%s) is over: macOS is shut down gracefully now and started again, on another node if the drained one is cordoned; unsaved work in the guest is lost",
			what, d.Grace)}
	default:
		c.Problem = base.Problem{Reason: macvirtv1alpha1.ReasonEvacuationRequested, Message: fmt.Sprintf(
			"%s: the machine keeps running until its claim releases it or until %s (drainGracePeriod %s), then macOS is shut down gracefully and started again, on another node if the drained one is cordoned",
			what, d.Since.Add(d.Grace).UTC().Format(time.RFC3339), d.Grace)}
	}
	return c, true
}

// SetHostDraining writes or removes the HostDraining condition.
func SetHostDraining(conds *[]metav1.Condition, d State, generation int64, now time.Time) {
	c, ok := HostDraining(d)
	if !ok {
		meta.RemoveStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
		return
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining, Status: c.Status,
		Reason: c.Reason, Message: c.Message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
}

// Warning is the Warning event a status change calls for: the
// machine turned HostDraining, or its drain stop began.
func Warning(before, after []metav1.Condition) (string, string, bool) {
	now := meta.FindStatusCondition(after, macvirtv1alpha1.ConditionHostDraining)
	if now == nil {
		return "", "", false
	}
	old := meta.FindStatusCondition(before, macvirtv1alpha1.ConditionHostDraining)
	if old != nil && old.Reason == now.Reason {
		return "", "", false
	}
	return macvirtv1alpha1.ConditionHostDraining, now.Message, true
}

// NodeOf is the node a machine's status says is draining under it,
// "" when none: what a pool and a claim read.
func NodeOf(m *macvirtv1alpha1.MacMachine) string {
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionHostDraining)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	if m.Status.NodeName != "" {
		return m.Status.NodeName
	}
	return "unknown"
}

// Mirror gives a claim its machine's HostDraining condition,
// so the tenant sees the drain and its deadline where it looks.
func Mirror(conds *[]metav1.Condition, m *macvirtv1alpha1.MacMachine, generation int64) {
	var c *metav1.Condition
	if m != nil {
		c = meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionHostDraining)
	}
	if c == nil || c.Status != metav1.ConditionTrue {
		meta.RemoveStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
		return
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining, Status: metav1.ConditionTrue,
		Reason: c.Reason, Message: fmt.Sprintf("machine %s/%s: %s", m.Namespace, m.Name, c.Message), ObservedGeneration: generation})
}
