/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// Draining an Apple node. Every VM is rendered with evictionStrategy
// External, so when a drain evicts its virt-launcher pod virt-api refuses
// the eviction (429) and marks the instance for evacuation
// (status.evacuationNodeName), and no KubeVirt controller acts on it: the
// machine controller does. An unbound machine is stopped gracefully at
// once (its pool deletes and replaces it); a bound one keeps running for
// its tenant, HostDraining, until its claim releases it or the class's
// drainGracePeriod ends, and is then stopped gracefully. Once its instance
// is gone the mark goes with it, and a machine that should run starts
// again, on another node: the drained one is cordoned. Nothing is ever
// killed, and the drain finishes when the last instance is gone.

// drainState is what the machine's instance says about a drain.
type drainState struct {
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

// observeDrain maps the instance's evacuation mark to the drain decision.
func observeDrain(o machineObservation) drainState {
	vmi := o.VMI
	if vmi == nil || vmi.Status.EvacuationNodeName == "" || vmi.IsFinal() || o.Deleting {
		return drainState{}
	}
	d := drainState{Node: vmi.Status.EvacuationNodeName, Since: o.Now, Bound: o.Machine.Spec.ClaimRef != nil}
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

// hostDrainingCondition is the machine's HostDraining condition while its
// node drains; ok is false when there is none.
func hostDrainingCondition(d drainState) (condition, bool) {
	if d.Node == "" {
		return condition{}, false
	}
	c := condition{status: metav1.ConditionTrue}
	// KubeVirt marks the instance on any eviction of its pod: kubectl
	// drain, but also the descheduler or its own workload updater, which
	// do not cordon the node.
	what := fmt.Sprintf("node %s is being drained (its virt-launcher pod was evicted: kubectl drain, the descheduler or a KubeVirt workload update)", d.Node)
	switch {
	case !d.Bound:
		c.problem = problem{macvirtv1alpha1.ReasonDrainStop, what +
			": the machine is idle, so macOS is shut down gracefully now and the machine replaced"}
	case d.Stop:
		c.problem = problem{macvirtv1alpha1.ReasonDrainStop, fmt.Sprintf(
			"%s and drainGracePeriod (%s) is over: macOS is shut down gracefully now and started again, on another node if the drained one is cordoned; unsaved work in the guest is lost",
			what, d.Grace)}
	default:
		c.problem = problem{macvirtv1alpha1.ReasonEvacuationRequested, fmt.Sprintf(
			"%s: the machine keeps running until its claim releases it or until %s (drainGracePeriod %s), then macOS is shut down gracefully and started again, on another node if the drained one is cordoned",
			what, d.Since.Add(d.Grace).UTC().Format(time.RFC3339), d.Grace)}
	}
	return c, true
}

// setHostDraining writes or removes the HostDraining condition.
func setHostDraining(conds *[]metav1.Condition, d drainState, generation int64, now time.Time) {
	c, ok := hostDrainingCondition(d)
	if !ok {
		meta.RemoveStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
		return
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining, Status: c.status,
		Reason: c.Reason, Message: c.Message, ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
}

// drainWarning is the Warning event a status change calls for: the
// machine turned HostDraining, or its drain stop began.
func drainWarning(before, after []metav1.Condition) (string, string, bool) {
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

// drainedNode is the node a machine's status says is draining under it,
// "" when none: what a pool and a claim read.
func drainedNode(m *macvirtv1alpha1.MacMachine) string {
	c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionHostDraining)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	if m.Status.NodeName != "" {
		return m.Status.NodeName
	}
	return "unknown"
}

// recordDrain records the Warning event of a drain transition.
func (r *MacMachineReconciler) recordDrain(before, m *macvirtv1alpha1.MacMachine) {
	if reason, note, ok := drainWarning(before.Status.Conditions, m.Status.Conditions); ok {
		recordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Drain", note)
	}
}

// mirrorHostDraining gives a claim its machine's HostDraining condition,
// so the tenant sees the drain and its deadline where it looks.
func mirrorHostDraining(conds *[]metav1.Condition, m *macvirtv1alpha1.MacMachine, generation int64) {
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

// hostRulesMissing reports a VM template without what every macvirt VM
// now carries for its host: one macOS slot requested and limited, and
// evictionStrategy External. VMs created by an older operator lack them.
func hostRulesMissing(vm *kubevirtv1.VirtualMachine) bool {
	t := vm.Spec.Template
	if t == nil {
		return false
	}
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	_, req := t.Spec.Domain.Resources.Requests[name]
	_, lim := t.Spec.Domain.Resources.Limits[name]
	s := t.Spec.EvictionStrategy
	return !req || !lim || s == nil || *s != kubevirtv1.EvictionStrategyExternal
}

// ensureHostRules answers: does the machine's VM ask for a macOS slot and
// keep drains from killing it? A VM an older operator created is patched
// (guarded by its resourceVersion); the change reaches KubeVirt at the
// VM's next start, and nothing is restarted for it. Its running instance
// keeps holding a licence without a slot, which the node controller
// subtracts from what the node advertises meanwhile.
func (r *MacMachineReconciler) ensureHostRules(ctx context.Context, o *machineObservation) (bool, error) {
	if o.VM == nil || !hostRulesMissing(o.VM) {
		return true, nil
	}
	// Best effort: stopping, starting and releasing must not wait on it.
	_ = r.patchVMTemplate(ctx, o, "its macOS slot request and evictionStrategy External",
		func(vm *kubevirtv1.VirtualMachine) { render.HostRules(&vm.Spec.Template.Spec) })
	return true, nil
}

// patchVMTemplate changes the template of the machine's VM, a VM the
// operator made before (under an older operator or another transport),
// guarded by its resourceVersion. KubeVirt uses the change from the VM's
// next start, and nothing is restarted for it. A conflict (KubeVirt writes
// the VM's status often) is tried again by the next reconcile; a refusal
// is said in an event on the machine, in the API server's words. The error
// is returned for the caller to weigh.
func (r *MacMachineReconciler) patchVMTemplate(ctx context.Context, o *machineObservation, what string,
	change func(*kubevirtv1.VirtualMachine)) error {
	vm := o.VM.DeepCopy()
	patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(vm)
	if err := r.Patch(ctx, vm, patch); err != nil {
		if !apierrors.IsConflict(err) {
			recordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Provision", fmt.Sprintf(
				"giving VirtualMachine %s/%s %s: %v", vm.Namespace, vm.Name, what, err))
		}
		ctrl.LoggerFrom(ctx).Info("VirtualMachine's template not updated; trying again later", "virtualMachine", vm.Name,
			"change", what, "reason", err.Error())
		return err
	}
	o.VM = vm
	ctrl.LoggerFrom(ctx).Info("VirtualMachine's template updated (from its next start)", "virtualMachine", vm.Name, "change", what)
	return nil
}
