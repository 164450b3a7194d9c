package pool

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// computePoolStatus derives the pool's counts and conditions from its
// scope. Precedence of Ready's reason: what needs a human (class or
// namespace missing), a refused write, too many unhealthy machines, then
// the idle target.
func computePoolStatus(s *poolScope) macvirtv1alpha1.MacPoolStatus {
	pool := s.Pool
	st := s.Plan.Counts
	st.ObservedGeneration = pool.Generation
	st.MaxMachines = pool.Spec.EffectiveMaxMachines()
	// A copy: SetStatusCondition edits in place, and the patch base must
	// keep the old conditions.
	st.Conditions = append([]metav1.Condition(nil), pool.Status.Conditions...)
	target := pool.Spec.EffectiveIdle()
	p := s.Blocked
	switch {
	case p != nil:
	case s.WriteFailed != nil:
		p = s.WriteFailed
	case s.Plan.TooManyUnhealthy:
		p = &base.Problem{Reason: macvirtv1alpha1.ReasonTooManyUnhealthy, Message: unhealthyMessage(s.Plan)}
	case s.Slots != nil && st.Idle < target:
		// Not Stalled: the machines wait, and go on once a slot is free.
		cond := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, ObservedGeneration: pool.Generation,
			Status: metav1.ConditionFalse, Reason: s.Slots.Reason, Message: s.Slots.Message}
		meta.SetStatusCondition(&st.Conditions, cond)
		meta.SetStatusCondition(&st.Conditions, base.StalledCondition(pool.Generation, nil))
		return st
	}
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, ObservedGeneration: pool.Generation}
	switch {
	case p != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, p.Reason, p.Message
	case st.Idle >= target:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected,
			fmt.Sprintf("%d idle machines ready (target %d)", st.Idle, target)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, macvirtv1alpha1.ReasonIdleTargetNotMet,
			fmt.Sprintf("%d of %d idle machines ready, %d provisioning", st.Idle, target, st.Provisioning)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	meta.SetStatusCondition(&st.Conditions, base.StalledCondition(pool.Generation, p))
	setIdleSuspended(&st, pool, s.Class, s.Machines)
	return st
}

// setIdleSuspended sets IdleSuspended on a pool whose idleState is
// Suspended (and removes it otherwise): False when the class's runtime
// cannot suspend, or idle machines are kept running by their host (their
// host agent says why in status.host.error).
func setIdleSuspended(st *macvirtv1alpha1.MacPoolStatus, pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, machines []macvirtv1alpha1.MacMachine) {
	if pool.Spec.IdleState != macvirtv1alpha1.IdleSuspended || class == nil {
		meta.RemoveStatusCondition(&st.Conditions, macvirtv1alpha1.ConditionIdleSuspended)
		return
	}
	cond := metav1.Condition{Type: macvirtv1alpha1.ConditionIdleSuspended, ObservedGeneration: pool.Generation,
		Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected,
		Message: fmt.Sprintf("%d of %d idle machines suspended; they hold no licence slot", st.Suspended, st.Idle)}
	if !class.Spec.OnHosts() {
		cond.Status, cond.Reason = metav1.ConditionFalse, macvirtv1alpha1.ReasonSuspendUnsupported
		cond.Message = fmt.Sprintf("MacClass %s runs on KubeVirt, which cannot save a VM's memory to disk; idle machines keep running, each holding "+
			"its node's macos-slots (KubeVirt's pause would stop their CPUs only, and free no slot)", class.Name)
		meta.SetStatusCondition(&st.Conditions, cond)
		return
	}
	kept, first := 0, ""
	for i := range machines {
		m := &machines[i]
		hv := m.Status.Host
		if m.Spec.ClaimRef != nil || !m.DeletionTimestamp.IsZero() || hv == nil || !strings.HasPrefix(hv.Error, macvirtv1alpha1.HostErrorKeptRunning) {
			continue
		}
		kept++
		if first == "" {
			first = fmt.Sprintf("%s on MacHost %s: %s", m.Name, m.Spec.HostName, hv.Error)
		}
	}
	if kept > 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, macvirtv1alpha1.ReasonSuspendUnsupported
		cond.Message = fmt.Sprintf("%d idle machines run, holding a licence slot each, because their host cannot suspend them; %s", kept, first)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
}

// unhealthyMessage says why the pool replaces none of its unhealthy machines.
func unhealthyMessage(p poolPlan) string {
	unbound := p.Counts.Idle + p.Counts.Provisioning + p.Counts.Unhealthy
	return fmt.Sprintf("%d of %d unbound machines are Failed or their guest agent is silent, more than maxUnhealthy allows (%d): "+
		"replacing none, as a shared cause (the agent endpoint unreachable, a broken image, a host down) is likelier than %d broken Macs",
		p.Counts.Unhealthy, unbound, p.MaxUnhealthy, p.Counts.Unhealthy)
}
