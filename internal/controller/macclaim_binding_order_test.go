package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
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
	c := fakeClient(t, &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}, trustPool(), m,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, claim)
	w := &writeLog{Client: c}
	rec := events.NewFakeRecorder(8)
	r := &MacClaimReconciler{Client: w, APIReader: c, Recorder: rec, Clock: clock.RealClock{}}
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
