package base

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestDeletingConditions(t *testing.T) {
	stalled := metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonClassNotFound}
	ready := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"}
	bound := metav1.Condition{Type: macvirtv1alpha1.ConditionBound, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonBound}
	for _, tc := range []struct {
		name        string
		in          []metav1.Condition
		wantStalled bool // a Stalled condition, False
	}{
		{name: "stalled before the deletion", in: []metav1.Condition{ready, stalled}, wantStalled: true},
		{name: "never stalled", in: []metav1.Condition{ready, bound}},
		{name: "no conditions yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]metav1.Condition(nil), tc.in...)
			got := DeletingConditions(in, 3, "going")
			if !equality.Semantic.DeepEqual(in, tc.in) {
				t.Error("the input was changed")
			}
			r := meta.FindStatusCondition(got, macvirtv1alpha1.ConditionReady)
			if r == nil || r.Status != metav1.ConditionFalse || r.Reason != macvirtv1alpha1.ReasonDeleting || r.ObservedGeneration != 3 {
				t.Errorf("Ready = %+v, want False Deleting at generation 3", r)
			}
			s := meta.FindStatusCondition(got, macvirtv1alpha1.ConditionStalled)
			switch {
			case tc.wantStalled && (s == nil || s.Status != metav1.ConditionFalse || s.Reason != macvirtv1alpha1.ReasonDeleting):
				t.Errorf("Stalled = %+v, want False Deleting", s)
			case !tc.wantStalled && s != nil:
				t.Errorf("Stalled = %+v appeared", s)
			}
			if b := meta.FindStatusCondition(got, macvirtv1alpha1.ConditionBound); (b != nil) != (meta.FindStatusCondition(tc.in, macvirtv1alpha1.ConditionBound) != nil) {
				t.Error("another condition was dropped or added")
			}
			if again := DeletingConditions(got, 3, "going"); !equality.Semantic.DeepEqual(again, got) {
				t.Error("not idempotent")
			}
		})
	}
}

func TestDeletingResult(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "macvirt.io", Resource: "macpools"}, "p", errors.New("the object has been modified"))
	if res, err := DeletingResult(conflict); err != nil || res.RequeueAfter != ConflictRetry {
		t.Errorf("a conflict: %+v, %v; want a requeue after %s and no error", res, err, ConflictRetry)
	}
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "macvirt.io", Resource: "macpools"}, "p", errors.New("no"))
	if _, err := DeletingResult(refused); err == nil {
		t.Error("a refusal was swallowed")
	}
	if res, err := DeletingResult(nil); err != nil || res.RequeueAfter != 0 {
		t.Errorf("success: %+v, %v", res, err)
	}
}
