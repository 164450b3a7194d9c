package claim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// writeLog records every write a reconciler makes, as "verb Kind[/status]".
type writeLog struct {
	client.Client
	mu     sync.Mutex
	writes []string
}

func (w *writeLog) log(verb string, obj client.Object, sub string) {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, verb+" "+kind+sub)
}

func (w *writeLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

func (w *writeLog) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.log("create", obj, "")
	return w.Client.Create(ctx, obj, opts...)
}

func (w *writeLog) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	w.log("update", obj, "")
	return w.Client.Update(ctx, obj, opts...)
}

func (w *writeLog) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.log("patch", obj, "")
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *writeLog) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	w.log("delete", obj, "")
	return w.Client.Delete(ctx, obj, opts...)
}

func (w *writeLog) Status() client.SubResourceWriter { return &writeLogStatus{w.Client.Status(), w} }

type writeLogStatus struct {
	client.SubResourceWriter
	w *writeLog
}

func (s *writeLogStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.w.log("update", obj, "/status")
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *writeLogStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.w.log("patch", obj, "/status")
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// A claim over an idle Ready machine is bound and made reachable in one
// reconcile, with one request per object: the reservation, the machine's
// side, the Service, its EndpointSlice, the connection Secret (created, not
// patched while the claim names none) and one status write that records
// Bound and Ready together. One event says Ready. A reconcile with nothing
// new writes nothing.
func TestAClaimIsBoundAndReachableInOneRequestPerObject(t *testing.T) {
	ctx := context.Background()
	m := trustMachine(func(m *macvirtv1alpha1.MacMachine) {
		m.UID, m.Status.Addresses, m.Status.NodeName = "m-uid", []string{"10.128.0.7"}, "mac-1"
	})
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid", Generation: 1},
		Spec: macvirtv1alpha1.MacClaimSpec{PoolName: "ci"}}
	c := controllertest.FakeClient(t, &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}, trustPool(), m,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, claim)
	w := &writeLog{Client: c}
	rec := events.NewFakeRecorder(8)
	r := &Reconciler{Client: w, APIReader: c, Recorder: rec, Clock: clock.RealClock{}}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "build"}}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	want := []string{"patch MacClaim/status", "update MacMachine", "create Service", "create EndpointSlice", "create Secret", "patch MacClaim/status"}
	if got := w.take(); !slices.Equal(got, want) {
		t.Errorf("writes: %q; want %q", got, want)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != macvirtv1alpha1.ClaimReady || !meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionBound) ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionServiceReady) || got.Status.BoundAt == nil ||
		got.Status.ConnectionSecretName != "build-connection" || got.Status.Connection == nil || got.Status.Connection.Address != "10.128.0.7" {
		t.Errorf("phase %s, connection %+v, secret %q, conditions %+v; want Bound and Ready with all of them",
			got.Status.Phase, got.Status.Connection, got.Status.ConnectionSecretName, got.Status.Conditions)
	}
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d events; want one, for Ready", n)
	}
	if e := <-rec.Events; !strings.Contains(e, "ClaimReady") {
		t.Errorf("event %q; want ClaimReady", e)
	}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("a reconcile with nothing new wrote %q", got)
	}
}

// refuseSecretCreates refuses every Secret create as a full ResourceQuota
// does: in admission, before the API server looks at the name.
type refuseSecretCreates struct{ client.Client }

func (r refuseSecretCreates) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return apierrors.NewForbidden(corev1.Resource("secrets"), obj.GetName(),
			errors.New("exceeded quota: no-more, requested: count/secrets=1, used: count/secrets=5, limited: count/secrets=5"))
	}
	return r.Client.Create(ctx, obj, opts...)
}

// A create of the connection Secret that admission refuses leaves the
// patch to decide: a Secret the claim left before a crash is written, and
// with none the claim shows the refusal in the API server's words, and a
// Warning event. (A tenant's Secret of that name is the controller suite's:
// only a real API server answers the patch's ownership test as it does.)
func TestARefusedConnectionSecretCreateIsDecidedByThePatchAndShown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		existing   func(claim *macvirtv1alpha1.MacClaim) *corev1.Secret
		wantStatus metav1.ConditionStatus
		wantReason string
		wantErr    bool
	}{
		{"the claim's own Secret from before a crash", func(claim *macvirtv1alpha1.MacClaim) *corev1.Secret {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "build-connection", Namespace: "team",
				OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacClaim", claim.Name, claim.UID)}}}
		}, metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected, false},
		{"none", nil, metav1.ConditionFalse, macvirtv1alpha1.ReasonCreateFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := trustMachine(func(m *macvirtv1alpha1.MacMachine) {
				m.UID, m.Status.Addresses = "m-uid", []string{"10.128.0.7"}
			})
			claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid", Generation: 1},
				Spec: macvirtv1alpha1.MacClaimSpec{PoolName: "ci"}}
			objs := []client.Object{&macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}, trustPool(), m,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, claim}
			if tc.existing != nil {
				objs = append(objs, tc.existing(claim))
			}
			c := controllertest.FakeClient(t, objs...)
			rec := events.NewFakeRecorder(8)
			r := &Reconciler{Client: refuseSecretCreates{c}, APIReader: c, Recorder: rec, Clock: clock.RealClock{}}
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "build"}}
			_, err := r.Reconcile(ctx, req)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile: %v; want an error: %v", err, tc.wantErr)
			}
			got := &macvirtv1alpha1.MacClaim{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
			if cond == nil || cond.Status != tc.wantStatus || cond.Reason != tc.wantReason {
				t.Fatalf("ConnectionSecretReady %+v; want %s %s", cond, tc.wantStatus, tc.wantReason)
			}
			if !meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionBound) {
				t.Errorf("the claim is not recorded Bound: %+v", got.Status.Conditions)
			}
			switch tc.wantReason {
			case macvirtv1alpha1.ReasonCreateFailed:
				if !strings.Contains(cond.Message, "exceeded quota: no-more") {
					t.Errorf("message %q; want the API server's words", cond.Message)
				}
				if e := <-rec.Events; !strings.Contains(e, "Warning "+macvirtv1alpha1.ReasonCreateFailed) {
					t.Errorf("event %q; want a Warning %s", e, macvirtv1alpha1.ReasonCreateFailed)
				}
			default:
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build-connection"}, s); err != nil || string(s.Data["address"]) != "10.128.0.7" {
					t.Errorf("the claim's Secret was not written: %v %v", s.Data, err)
				}
			}
		})
	}
}

// TestADeletedClaimIsNoLongerStalled: a claim that was Stalled before its
// deletion, and is kept while its dependents go, says it is being deleted,
// not that it waits for a human.
func TestADeletedClaimIsNoLongerStalled(t *testing.T) {
	stalled := []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonClassNotFound, LastTransitionTime: metav1.Now()},
	}
	gone := metav1.NewTime(time.Now())
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", Generation: 1, DeletionTimestamp: &gone, Finalizers: []string{"foregroundDeletion"}},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "gone"}}
	claim.Status.Conditions = stalled
	c := controllertest.FakeClient(t, claim)
	ctx := context.Background()
	rec := events.NewFakeRecorder(10)
	if _, err := (&Reconciler{Client: c, APIReader: c, Recorder: rec}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}); err != nil {
		t.Fatal(err)
	}
	gotClaim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), gotClaim); err != nil {
		t.Fatal(err)
	}
	for what, conds := range map[string][]metav1.Condition{"claim": gotClaim.Status.Conditions} {
		s := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionStalled)
		r := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionReady)
		if s == nil || s.Status != metav1.ConditionFalse || s.Reason != macvirtv1alpha1.ReasonDeleting ||
			r == nil || r.Reason != macvirtv1alpha1.ReasonDeleting {
			t.Errorf("a %s being deleted: Stalled %+v, Ready %+v; want both False with reason Deleting", what, s, r)
		}
	}
}
