package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// problem is a reason and a human-readable message.
type problem struct {
	Reason  string
	Message string
}

// condition is a condition's status with its reason and message.
type condition struct {
	status metav1.ConditionStatus
	problem
}

func condTrue(msg string) condition {
	return condition{metav1.ConditionTrue, problem{macvirtv1alpha1.ReasonAsExpected, msg}}
}

func condFalse(reason, format string, args ...any) condition {
	return condition{metav1.ConditionFalse, problem{reason, fmt.Sprintf(format, args...)}}
}

// machineIsReady reports the machine's Ready condition.
func machineIsReady(m *macvirtv1alpha1.MacMachine) bool {
	return meta.IsStatusConditionTrue(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
}

// stalledCondition is the kstatus-style Stalled condition: True, with the
// problem's reason and message, when progress needs a human; False otherwise.
// Tools such as kstatus report an object with Stalled=True as Failed.
func stalledCondition(generation int64, p *problem) metav1.Condition {
	c := metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonAsExpected, Message: "no action needed", ObservedGeneration: generation}
	if p != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, p.Reason, p.Message
	}
	return c
}

// setSummaryConditions sets Ready and Stalled for a kind whose only failure
// mode is a problem that needs a human: with no problem the object is Ready
// (with readyMessage); with one it is not Ready and Stalled, for the same
// reason.
func setSummaryConditions(conds *[]metav1.Condition, generation int64, p *problem, readyMessage string) {
	ready := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: macvirtv1alpha1.ReasonAsExpected, Message: readyMessage, ObservedGeneration: generation}
	if p != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, p.Reason, p.Message
	}
	meta.SetStatusCondition(conds, ready)
	meta.SetStatusCondition(conds, stalledCondition(generation, p))
}
