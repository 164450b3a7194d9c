package pool

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/controller/metrics"
)

func TestADeletedPoolsSeriesGo(t *testing.T) {
	metrics.PoolGauges(&macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, macvirtv1alpha1.MacPoolStatus{Idle: 2})
	metrics.PoolGauges(&macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, macvirtv1alpha1.MacPoolStatus{Idle: 3, Bound: 1})
	r := &Reconciler{Client: controllertest.FakeClient(t)}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "gone"}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(metrics.PoolMachines); n != 5 {
		t.Errorf("%d pool series; want the 5 of the pool that is left", n)
	}
	if v := testutil.ToFloat64(metrics.PoolMachines.WithLabelValues("kept", "idle")); v != 2 {
		t.Errorf("kept idle = %v; want 2", v)
	}
	metrics.ForgetPool("kept")
}

// Provisioning is timed from creation to Starting; booting from the VM
// running to Ready after a start or boot. A Ready machine that lost its
// heartbeat and got it back, and other moves, time nothing.

// TestADeletedPoolIsNoLongerStalled: a pool that was Stalled before its
// deletion, and is kept while its dependents go, says it is being deleted,
// not that it waits for a human.
func TestADeletedPoolIsNoLongerStalled(t *testing.T) {
	stalled := []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
	}
	gone := metav1.NewTime(time.Now())
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 2, DeletionTimestamp: &gone, Finalizers: []string{"foregroundDeletion"}},
		Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "gone"}}
	pool.Status.Conditions = stalled
	c := controllertest.FakeClient(t, pool)
	ctx := context.Background()
	if _, err := (&Reconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)}); err != nil {
		t.Fatal(err)
	}
	gotPool := &macvirtv1alpha1.MacPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), gotPool); err != nil {
		t.Fatal(err)
	}
	for what, conds := range map[string][]metav1.Condition{"pool": gotPool.Status.Conditions} {
		s := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionStalled)
		r := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionReady)
		if s == nil || s.Status != metav1.ConditionFalse || s.Reason != macvirtv1alpha1.ReasonDeleting ||
			r == nil || r.Reason != macvirtv1alpha1.ReasonDeleting {
			t.Errorf("a %s being deleted: Stalled %+v, Ready %+v; want both False with reason Deleting", what, s, r)
		}
	}
}
