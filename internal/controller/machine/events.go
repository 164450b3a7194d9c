package machine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/drain"
	"github.com/macvirt/macvirt/internal/controller/metrics"
)

// forgetKilled drops the killed instance the watch kept for the machine
// once its status, as written, records the forced power-off (the condition
// keeps it from then on), or once the machine is to run again.
func (r *Reconciler) forgetKilled(o *machineObservation) {
	if o.Killed == nil {
		return
	}
	c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if (c != nil && c.Reason == macvirtv1alpha1.ReasonForcedPowerOff) || (wantsRunning(o.Machine) && !o.Deleting) {
		r.killed.Forget(client.ObjectKeyFromObject(o.Machine))
	}
}

func (r *Reconciler) recordPhase(m *macvirtv1alpha1.MacMachine) {
	if r.Recorder == nil {
		return
	}
	eventType := corev1.EventTypeNormal
	if m.Status.Phase == macvirtv1alpha1.MachineFailed {
		eventType = corev1.EventTypeWarning
	}
	note := string(m.Status.Phase)
	for _, c := range m.Status.Conditions {
		if c.Type == macvirtv1alpha1.ConditionReady {
			note = fmt.Sprintf("%s: %s", m.Status.Phase, c.Message)
		}
	}
	base.RecordEvent(r.Recorder, m, eventType, "Machine"+string(m.Status.Phase), "Reconcile", note)
}

// recordDiskProblem announces, with a Warning event, a disk problem the
// machine has just entered.
func (r *Reconciler) recordDiskProblem(before, after *macvirtv1alpha1.MacMachine) {
	now := meta.FindStatusCondition(after.Status.Conditions, macvirtv1alpha1.ConditionDisksReady)
	if now == nil || !diskWarningReasons[now.Reason] {
		return
	}
	if was := meta.FindStatusCondition(before.Status.Conditions, macvirtv1alpha1.ConditionDisksReady); was != nil && was.Reason == now.Reason {
		return
	}
	base.RecordEvent(r.Recorder, after, corev1.EventTypeWarning, now.Reason, "Reconcile", now.Message)
}

// recordDrain records the Warning event of a drain transition.
func (r *Reconciler) recordDrain(before, m *macvirtv1alpha1.MacMachine) {
	if reason, note, ok := drain.Warning(before.Status.Conditions, m.Status.Conditions); ok {
		base.RecordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Drain", note)
	}
}

// recordNotOwned announces, with a Warning event, that the machine has just
// found objects under its names that it does not control.
func (r *Reconciler) recordNotOwned(before, after *macvirtv1alpha1.MacMachine) {
	notOwned := func(m *macvirtv1alpha1.MacMachine) *metav1.Condition {
		c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != macvirtv1alpha1.ReasonNotOwned {
			return nil
		}
		return c
	}
	now := notOwned(after)
	if now == nil || notOwned(before) != nil {
		return
	}
	base.RecordEvent(r.Recorder, after, corev1.EventTypeWarning, macvirtv1alpha1.ReasonNotOwned, "Reconcile", now.Message)
}

// reportForcedPowerOff counts a killed instance in
// macvirt_machine_forced_poweroffs_total and records a Warning event, once
// per instance, whether the machine is stopped or deleted.
func (r *Reconciler) reportForcedPowerOff(o *machineObservation) {
	vmi := killedByStop(*o)
	if vmi == nil {
		return
	}
	if _, seen := r.forcedPowerOffs.LoadOrAssume(vmi.UID, struct{}{}, o.Now, base.UntilForgotten); seen {
		return
	}
	metrics.ForcedPowerOffs.WithLabelValues(o.Machine.Namespace).Inc()
	c, ok := forcedPowerOff(*o)
	if !ok {
		return
	}
	base.RecordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonForcedPowerOff, "Stop", c.Message)
}
