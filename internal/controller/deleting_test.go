package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
			got := deletingConditions(in, 3, "going")
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
			if again := deletingConditions(got, 3, "going"); !equality.Semantic.DeepEqual(again, got) {
				t.Error("not idempotent")
			}
		})
	}
}

// TestADeletedPoolOrClaimIsNoLongerStalled: a pool or claim that was
// Stalled before its deletion, and is kept while its dependents go, says
// it is being deleted, not that it waits for a human.
func TestADeletedPoolOrClaimIsNoLongerStalled(t *testing.T) {
	stalled := []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
	}
	gone := metav1.NewTime(time.Now())
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2, DeletionTimestamp: &gone, Finalizers: []string{"foregroundDeletion"}},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "gone"}}
	pool.Status.Conditions = stalled
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", Generation: 1, DeletionTimestamp: &gone, Finalizers: []string{"foregroundDeletion"}},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "gone"}}
	claim.Status.Conditions = stalled
	c := fakeClient(t, pool, claim)
	ctx := context.Background()
	if _, err := (&MacPoolReconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)}); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	if _, err := (&MacClaimReconciler{Client: c, APIReader: c, Recorder: rec}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}); err != nil {
		t.Fatal(err)
	}
	gotPool, gotClaim := &macvirtv1alpha1.MacPool{}, &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), gotPool); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), gotClaim); err != nil {
		t.Fatal(err)
	}
	for what, conds := range map[string][]metav1.Condition{"pool": gotPool.Status.Conditions, "claim": gotClaim.Status.Conditions} {
		s := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionStalled)
		r := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionReady)
		if s == nil || s.Status != metav1.ConditionFalse || s.Reason != macvirtv1alpha1.ReasonDeleting ||
			r == nil || r.Reason != macvirtv1alpha1.ReasonDeleting {
			t.Errorf("a %s being deleted: Stalled %+v, Ready %+v; want both False with reason Deleting", what, s, r)
		}
	}
}

func TestDeletingResult(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "macvirt.io", Resource: "macpools"}, "p", errors.New("the object has been modified"))
	if res, err := deletingResult(conflict); err != nil || res.RequeueAfter != conflictRetry {
		t.Errorf("a conflict: %+v, %v; want a requeue after %s and no error", res, err, conflictRetry)
	}
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "macvirt.io", Resource: "macpools"}, "p", errors.New("no"))
	if _, err := deletingResult(refused); err == nil {
		t.Error("a refusal was swallowed")
	}
	if res, err := deletingResult(nil); err != nil || res.RequeueAfter != 0 {
		t.Errorf("success: %+v, %v", res, err)
	}
}
