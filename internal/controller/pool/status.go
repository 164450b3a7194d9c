package pool

import (
	"fmt"

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
	return st
}

// unhealthyMessage says why the pool replaces none of its unhealthy machines.
func unhealthyMessage(p poolPlan) string {
	unbound := p.Counts.Idle + p.Counts.Provisioning + p.Counts.Unhealthy
	return fmt.Sprintf("%d of %d unbound machines are Failed or their guest agent is silent, more than maxUnhealthy allows (%d): "+
		"replacing none, as a shared cause (the agent endpoint unreachable, a broken image, a host down) is likelier than %d broken Macs",
		p.Counts.Unhealthy, unbound, p.MaxUnhealthy, p.Counts.Unhealthy)
}
