package pool

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

func TestComputePoolStatus(t *testing.T) {
	idle := int32(2)
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 4},
		Spec: macvirtv1alpha1.MacPoolSpec{Idle: &idle}}
	counts := func(idle, prov, unhealthy int32) macvirtv1alpha1.MacPoolStatus {
		return macvirtv1alpha1.MacPoolStatus{Idle: idle, Provisioning: prov, Unhealthy: unhealthy}
	}
	for name, tc := range map[string]struct {
		scope          poolScope
		ready, stalled metav1.ConditionStatus
		reason         string
	}{
		"target met": {poolScope{Plan: poolPlan{Counts: counts(2, 0, 0)}},
			metav1.ConditionTrue, metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected},
		"filling": {poolScope{Plan: poolPlan{Counts: counts(1, 1, 0)}},
			metav1.ConditionFalse, metav1.ConditionFalse, macvirtv1alpha1.ReasonIdleTargetNotMet},
		"too many unhealthy": {poolScope{Plan: poolPlan{Counts: counts(0, 0, 2), MaxUnhealthy: 1, TooManyUnhealthy: true}},
			metav1.ConditionFalse, metav1.ConditionTrue, macvirtv1alpha1.ReasonTooManyUnhealthy},
		"a refused create outranks unhealthy machines": {poolScope{Plan: poolPlan{Counts: counts(0, 0, 2), TooManyUnhealthy: true},
			WriteFailed: &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: "exceeded quota"}},
			metav1.ConditionFalse, metav1.ConditionTrue, macvirtv1alpha1.ReasonCreateFailed},
		"a missing class outranks a refused create": {poolScope{Blocked: &base.Problem{Reason: macvirtv1alpha1.ReasonClassNotFound, Message: "gone"},
			WriteFailed: &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: "exceeded quota"}},
			metav1.ConditionFalse, metav1.ConditionTrue, macvirtv1alpha1.ReasonClassNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			s := tc.scope
			s.Pool = pool
			st := computePoolStatus(&s)
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			stalled := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason || ready.ObservedGeneration != 4 {
				t.Errorf("Ready = %+v, want %s %s at generation 4", ready, tc.ready, tc.reason)
			}
			if stalled == nil || stalled.Status != tc.stalled {
				t.Errorf("Stalled = %+v, want %s", stalled, tc.stalled)
			}
			if st.MaxMachines != 4 {
				t.Errorf("maxMachines = %d, want twice idle", st.MaxMachines)
			}
		})
	}
	if len(pool.Status.Conditions) != 0 {
		t.Errorf("computing the status changed the pool it read: %+v", pool.Status.Conditions)
	}
}
