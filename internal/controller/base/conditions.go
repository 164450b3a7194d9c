package base

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Problem is a condition reason and a human-readable message.
type Problem struct {
	Reason  string
	Message string
}

// Condition is a condition's status with its reason and message, as the
// pure status computations decide it.
type Condition struct {
	Status metav1.ConditionStatus
	Problem
}

// CondTrue is a True condition, reason AsExpected, saying msg.
func CondTrue(msg string) Condition {
	return Condition{Status: metav1.ConditionTrue, Problem: Problem{Reason: macvirtv1alpha1.ReasonAsExpected, Message: msg}}
}

// CondFalse is a False condition of reason, its message formatted.
func CondFalse(reason, format string, args ...any) Condition {
	return Condition{Status: metav1.ConditionFalse, Problem: Problem{Reason: reason, Message: fmt.Sprintf(format, args...)}}
}

// StalledCondition is the kstatus-style Stalled condition: True, with the
// problem's reason and message, when progress needs a human; False
// otherwise. Tools such as kstatus report an object with Stalled=True as
// Failed.
func StalledCondition(generation int64, p *Problem) metav1.Condition {
	c := metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonAsExpected, Message: "no action needed", ObservedGeneration: generation}
	if p != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, p.Reason, p.Message
	}
	return c
}

// SetSummaryConditions sets Ready and Stalled for a kind whose only failure
// mode is a problem that needs a human: with no problem the object is Ready
// (with readyMessage); with one it is not Ready and Stalled, for the same
// reason.
func SetSummaryConditions(conds *[]metav1.Condition, generation int64, p *Problem, readyMessage string) {
	ready := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: macvirtv1alpha1.ReasonAsExpected, Message: readyMessage, ObservedGeneration: generation}
	if p != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, p.Reason, p.Message
	}
	meta.SetStatusCondition(conds, ready)
	meta.SetStatusCondition(conds, StalledCondition(generation, p))
}

// TurnedStalled reports a Stalled condition that is True now and was not,
// or was for another reason, with its reason and message: the moment a
// human is needed is a Warning event.
func TurnedStalled(before, after []metav1.Condition) (reason, message string, turned bool) {
	now := meta.FindStatusCondition(after, macvirtv1alpha1.ConditionStalled)
	if now == nil || now.Status != metav1.ConditionTrue {
		return "", "", false
	}
	if was := meta.FindStatusCondition(before, macvirtv1alpha1.ConditionStalled); was != nil && was.Status == metav1.ConditionTrue && was.Reason == now.Reason {
		return "", "", false
	}
	return now.Reason, now.Message, true
}

// Int32 is n as an int32, clamped (counts of a status stay far below).
func Int32(n int) int32 {
	return int32(max(math.MinInt32, min(n, math.MaxInt32)))
}
