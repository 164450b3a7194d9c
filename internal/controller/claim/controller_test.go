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
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/render"
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
	if obj.GetUID() == "" {
		// As the API server does; the fake client gives none.
		obj.SetUID(uuid.NewUUID())
	}
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

// exposeTo does what the machine's exposure controller does once the
// machine is bound: its NetworkPolicy lets the claim's namespace in.
func exposeTo(t *testing.T, c client.Client, m *macvirtv1alpha1.MacMachine, ns string) {
	t.Helper()
	ctx := context.Background()
	np := &networkingv1.NetworkPolicy{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: render.NetworkPolicyName(m)}, np); err != nil {
		t.Fatal(err)
	}
	np.Spec = render.NetworkPolicy(&macvirtv1alpha1.MacClass{}, m, render.Exposure{ClaimNamespace: ns}).Spec
	if err := c.Update(ctx, np); err != nil {
		t.Fatal(err)
	}
}

// claimFixture is a claim of namespace team on pool ci, an idle Ready
// machine of that pool with its (unbound) NetworkPolicy, and a reconciler
// whose writes are logged.
func claimFixture(t *testing.T, spec macvirtv1alpha1.MacClaimSpec, extra ...client.Object) (client.WithWatch, *writeLog, *events.FakeRecorder, *Reconciler, ctrl.Request, *macvirtv1alpha1.MacMachine) {
	m := trustMachine(func(m *macvirtv1alpha1.MacMachine) {
		m.UID, m.Status.Addresses, m.Status.NodeName = "m-uid", []string{"10.128.0.7"}, "mac-1"
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{SSHHostKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0"}}
	})
	spec.PoolName = "ci"
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid", Generation: 1}, Spec: spec}
	objs := append([]client.Object{&macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}, trustPool(), m,
		render.NetworkPolicy(&macvirtv1alpha1.MacClass{}, m, render.Exposure{}),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, claim}, extra...)
	c := controllertest.FakeClient(t, objs...)
	w := &writeLog{Client: c}
	rec := events.NewFakeRecorder(8)
	r := &Reconciler{Client: w, APIReader: c, Recorder: rec, Clock: clock.RealClock{}}
	return c, w, rec, r, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "build"}}, m
}

// The write budget. A claim over an idle Ready machine is Ready after three
// writes, the tenant's create of the claim included, and the machine's
// NetworkPolicy (the exposure controller's write): the machine's claimRef,
// then, once the policy lets the claim's namespace in, one status write
// that records Bound, Ready and the connection together. No reservation,
// no Service, Secret or event on the way; the claim's DNS name (the
// namespace's headless Service, made once, and the claim's EndpointSlice)
// follows in the next reconcile, without a status write. A reconcile with
// nothing new writes nothing.
func TestAClaimIsReadyInOneMachineWriteAndOneStatusWrite(t *testing.T) {
	ctx := context.Background()
	c, w, rec, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{})

	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"update MacMachine"}; !slices.Equal(got, want) {
		t.Errorf("binding: writes %q; want %q", got, want)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > exposureHold {
		t.Errorf("a claim waiting for its machine's NetworkPolicy looks again after %v; want within %v", res.RequeueAfter, exposureHold)
	}
	// Until the policy lets it in, the claim waits without a status write,
	// however often it is looked at.
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("waiting for the NetworkPolicy wrote %q", got)
	}

	exposeTo(t, c, m, "team")
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"patch MacClaim/status"}; !slices.Equal(got, want) {
		t.Errorf("ready: writes %q; want %q", got, want)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	conn := got.Status.Connection
	if got.Status.Phase != macvirtv1alpha1.ClaimReady || !meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionBound) ||
		got.Status.BoundAt == nil || got.Status.ReadyAt == nil || conn == nil || conn.Address != "10.128.0.7" || conn.User != "admin" ||
		conn.Host != "build.macs.team.svc" || conn.ServiceName != "macs" || len(conn.HostKeys) != 1 {
		t.Errorf("phase %s, connection %+v; want Bound and Ready with the whole connection", got.Status.Phase, conn)
	}
	for _, cond := range got.Status.Conditions {
		if cond.Type != macvirtv1alpha1.ConditionBound && cond.Type != macvirtv1alpha1.ConditionReady {
			t.Errorf("condition %s=%s on a Ready claim; want only Bound and Ready", cond.Type, cond.Status)
		}
	}
	if e := controllertest.Events(rec); e != "" {
		t.Errorf("events %q; want none on success", e)
	}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"create Service", "create EndpointSlice"}; !slices.Equal(got, want) {
		t.Errorf("after Ready: writes %q; want %q", got, want)
	}
	slice := &discoveryv1.EndpointSlice{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build.macs"}, slice); err != nil {
		t.Fatal(err)
	}
	if len(slice.Endpoints) != 1 || slice.Endpoints[0].Hostname == nil || *slice.Endpoints[0].Hostname != "build" ||
		slice.Endpoints[0].Addresses[0] != "10.128.0.7" || slice.Labels[discoveryv1.LabelServiceName] != "macs" {
		t.Errorf("slice %+v; want build at 10.128.0.7 under macs", slice)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "macs"}, svc); err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("namespace Service %+v, %v; want a headless one", svc.Spec, err)
	}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("a reconcile with nothing new wrote %q", got)
	}
}

// A claim whose machine's policy never catches up (the exposure
// controller is down) is not left silent: once exposureHold has passed its
// status says it is bound, and what it waits for.
func TestAClaimSaysItWaitsForItsNetworkPolicyAfterTheHold(t *testing.T) {
	ctx := context.Background()
	c, w, _, r, req, _ := claimFixture(t, macvirtv1alpha1.MacClaimSpec{})
	now := time.Now()
	clk := clocktesting.NewFakePassiveClock(now)
	r.Clock = clk
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	w.take()
	clk.SetTime(now.Add(exposureHold))
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"patch MacClaim/status"}; !slices.Equal(got, want) {
		t.Errorf("writes %q; want %q", got, want)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if got.Status.Phase != macvirtv1alpha1.ClaimBound || ready == nil || ready.Reason != macvirtv1alpha1.ReasonWaitingForNetworkPolicy {
		t.Errorf("phase %s, Ready %+v; want Bound, not Ready for %s", got.Status.Phase, ready, macvirtv1alpha1.ReasonWaitingForNetworkPolicy)
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

// readyClaim takes the fixture's claim to Ready.
func readyClaim(t *testing.T, c client.Client, r *Reconciler, req ctrl.Request, m *macvirtv1alpha1.MacMachine) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	exposeTo(t, c, m, "team")
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// A claim that asks for a connection Secret gets it once it is Ready, by a
// create; when its connection changes the Secret is deleted, by the UID its
// create returned, and created again. Nothing else is ever written to a
// Secret, and nothing read.
func TestAConnectionSecretIsCreatedOnceAfterReadyAndSaysWhenItIsStale(t *testing.T) {
	ctx := context.Background()
	c, w, rec, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{
		WriteConnectionSecretToRef: &macvirtv1alpha1.LocalSecretReference{Name: "build-ssh"}})
	readyClaim(t, c, r, req, m)
	w.take()
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"create Service", "create EndpointSlice", "create Secret", "patch MacClaim/status"}; !slices.Equal(got, want) {
		t.Errorf("after Ready: writes %q; want %q", got, want)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build-ssh"}, secret); err != nil {
		t.Fatal(err)
	}
	if got.Status.ConnectionSecretName != "build-ssh" || got.Status.ConnectionSecretUID != secret.UID || secret.UID == "" ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady) ||
		string(secret.Data["host"]) != "build.macs.team.svc" || string(secret.Data["user"]) != "admin" ||
		secret.Data["address"] != nil || string(secret.Data["known_hosts"]) != "build.macs.team.svc ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0\n" {
		t.Errorf("status %q %q %+v, Secret %q; want the Secret recorded, holding the connection by name, without the pod address",
			got.Status.ConnectionSecretName, got.Status.ConnectionSecretUID, got.Status.Conditions, secret.Data)
	}

	// The machine's instance was recreated elsewhere: a new address, which
	// the Secret does not hold.
	moved := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), moved); err != nil {
		t.Fatal(err)
	}
	moved.Status.Addresses = []string{"10.128.3.9"}
	if err := c.Status().Update(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"update EndpointSlice", "patch MacClaim/status"}; !slices.Equal(got, want) {
		t.Errorf("moved: writes %q; want %q (the Secret still holds what connects)", got, want)
	}

	// New host keys: the Secret is stale, and the claim says so; the
	// operator cannot delete it.
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), moved); err != nil {
		t.Fatal(err)
	}
	moved.Status.Guest.SSHHostKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINEW"}
	if err := c.Status().Update(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := w.take(), []string{"create Secret", "patch MacClaim/status"}; !slices.Equal(got, want) {
		t.Errorf("new keys: writes %q; want %q", got, want)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != macvirtv1alpha1.ReasonConnectionSecretStale ||
		!strings.Contains(cond.Message, "delete it and it is written again") || got.Status.ConnectionSecretUID != secret.UID {
		t.Errorf("ConnectionSecretReady %+v, UID %s; want False ConnectionSecretStale, asking for the Secret to be deleted", cond, got.Status.ConnectionSecretUID)
	}
	if ev := controllertest.Events(rec); !strings.Contains(ev, "Warning ConnectionSecretStale") {
		t.Errorf("events %q; want a ConnectionSecretStale Warning", ev)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Errorf("stale, before the resync: writes %q; want none", got)
	}

	// The tenant deletes it: at the resync it is written again.
	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	r.ConnectionResync = time.Nanosecond
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build-ssh"}, again); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(again.Data["known_hosts"]), "AAAAINEW") || again.UID == secret.UID || got.Status.ConnectionSecretUID != again.UID ||
		!meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady) {
		t.Errorf("Secret %q (UID %s, was %s), status UID %s; want the new keys in a new Secret, recorded",
			again.Data["known_hosts"], again.UID, secret.UID, got.Status.ConnectionSecretUID)
	}
}

// A connection Secret that cannot be written leaves the claim Ready and
// says why: admission's refusal in the API server's words (and a Warning,
// and a retry), or a Secret of that name that is not the claim's, which is
// left as it is.
func TestAConnectionSecretThatCannotBeWrittenIsShown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		existing   []client.Object
		refuse     bool
		wantReason string
	}{
		{"refused by a quota", nil, true, macvirtv1alpha1.ReasonCreateFailed},
		{"a tenant's Secret of that name", []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "build-ssh", Namespace: "team"},
			Data: map[string][]byte{"mine": []byte("yes")}}}, false, macvirtv1alpha1.ReasonSecretConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, _, rec, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{
				WriteConnectionSecretToRef: &macvirtv1alpha1.LocalSecretReference{Name: "build-ssh"}}, tc.existing...)
			readyClaim(t, c, r, req, m)
			if tc.refuse {
				r.Client = refuseSecretCreates{r.Client}
			}
			_, err := r.Reconcile(ctx, req)
			if (err != nil) != tc.refuse {
				t.Fatalf("Reconcile: %v; want an error: %v", err, tc.refuse)
			}
			got := &macvirtv1alpha1.MacClaim{}
			if err := c.Get(ctx, req.NamespacedName, got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tc.wantReason || got.Status.Phase != macvirtv1alpha1.ClaimReady {
				t.Fatalf("phase %s, ConnectionSecretReady %+v; want Ready, and False %s", got.Status.Phase, cond, tc.wantReason)
			}
			if got.Status.ConnectionSecretName != "" {
				t.Errorf("status names Secret %q; want none", got.Status.ConnectionSecretName)
			}
			e := controllertest.Events(rec)
			if !strings.Contains(e, "Warning "+tc.wantReason) {
				t.Errorf("events %q; want a Warning %s", e, tc.wantReason)
			}
			if tc.refuse && !strings.Contains(cond.Message, "exceeded quota: no-more") {
				t.Errorf("message %q; want the API server's words", cond.Message)
			}
			if !tc.refuse {
				s := &corev1.Secret{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build-ssh"}, s); err != nil || string(s.Data["mine"]) != "yes" {
					t.Errorf("the tenant's Secret was touched: %v %v", s.Data, err)
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

// failStatusOnce fails the first claim status write after a Secret was
// created, as a conflict does when the claim changed meanwhile.
type failStatusOnce struct {
	client.Client
	armed, fired bool
}

func (f *failStatusOnce) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		f.armed = true
	}
	return f.Client.Create(ctx, obj, opts...)
}

func (f *failStatusOnce) Status() client.SubResourceWriter {
	return &failStatusOnceWriter{f.Client.Status(), f}
}

type failStatusOnceWriter struct {
	client.SubResourceWriter
	f *failStatusOnce
}

func (w *failStatusOnceWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if w.f.armed && !w.f.fired {
		w.f.fired = true
		return apierrors.NewConflict(macvirtv1alpha1.GroupVersion.WithResource("macclaims").GroupResource(), obj.GetName(), errors.New("changed meanwhile"))
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// A status write lost after the connection Secret's create (a conflict)
// leaves the Secret the claim's own: the next reconcile records it, and
// never calls it someone else's.
func TestAConnectionSecretStaysTheClaimsWhenTheStatusWriteAfterItIsLost(t *testing.T) {
	ctx := context.Background()
	c, _, rec, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{
		WriteConnectionSecretToRef: &macvirtv1alpha1.LocalSecretReference{Name: "build-ssh"}})
	readyClaim(t, c, r, req, m)
	f := &failStatusOnce{Client: r.Client}
	r.Client = f
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if !f.fired {
		t.Fatal("the status write after the Secret's create was not failed")
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "build-ssh"}, secret); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady) ||
		got.Status.ConnectionSecretName != "build-ssh" || got.Status.ConnectionSecretUID != secret.UID {
		t.Errorf("status %q %q %+v; want the claim's own Secret %s recorded", got.Status.ConnectionSecretName,
			got.Status.ConnectionSecretUID, got.Status.Conditions, secret.UID)
	}
	if e := controllertest.Events(rec); strings.Contains(e, macvirtv1alpha1.ReasonSecretConflict) {
		t.Errorf("events %q; want no SecretConflict", e)
	}
}

// cacheView answers Gets of Services as the operator's cache does: it holds
// only Services labelled for claims.
type cacheView struct{ client.Client }

func (v cacheView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := v.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*corev1.Service); ok {
		if _, labelled := obj.GetLabels()[macvirtv1alpha1.LabelClaim]; !labelled {
			return apierrors.NewNotFound(corev1.Resource("services"), key.Name)
		}
	}
	return nil
}

// A tenant's own Service named macs, which the operator's cache does not
// hold, leaves the claim without a DNS name, saying so once: its status
// settles, and is not rewritten back and forth.
func TestATenantsServiceNamedMacsSettlesTheClaimWithoutAName(t *testing.T) {
	ctx := context.Background()
	mine := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "macs", Namespace: "team"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	c, w, _, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{}, mine)
	r.Client = cacheView{r.Client}
	readyClaim(t, c, r, req, m)
	w.take()
	for i := range 4 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatal(err)
		}
		got := w.take()
		var statusWrites int
		for _, wr := range got {
			if wr == "patch MacClaim/status" {
				statusWrites++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[i == 0]; statusWrites != want {
			t.Errorf("reconcile %d: writes %q; want %d status writes", i, got, want)
		}
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionServiceReady)
	if got.Status.Connection.Host != "" || cond == nil || cond.Reason != macvirtv1alpha1.ReasonServiceConflict || got.Status.Phase != macvirtv1alpha1.ClaimReady {
		t.Errorf("host %q, ServiceReady %+v, phase %s; want Ready at its address only, saying why", got.Status.Connection.Host, cond, got.Status.Phase)
	}
}

// A claim that turns to a Service of its own (its access type changed)
// takes its name off the namespace Service: the slice left behind would
// follow no machine.
func TestAClaimWithAServiceOfItsOwnTakesItsNameOffTheNamespaceService(t *testing.T) {
	ctx := context.Background()
	c, _, _, r, req, m := claimFixture(t, macvirtv1alpha1.MacClaimSpec{})
	readyClaim(t, c, r, req, m)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{}
	key := types.NamespacedName{Namespace: "team", Name: "build.macs"}
	if err := c.Get(ctx, key, slice); err != nil || len(slice.Endpoints) != 1 {
		t.Fatalf("slice %+v, %v; want the claim's name published", slice.Endpoints, err)
	}
	class := &macvirtv1alpha1.MacClass{}
	if err := c.Get(ctx, types.NamespacedName{Name: "sonoma"}, class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessLoadBalancer}
	if err := c.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, req.NamespacedName, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.Access.Type = macvirtv1alpha1.AccessLoadBalancer
	if err := c.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, slice); err != nil || len(slice.Endpoints) != 0 {
		t.Errorf("slice %+v, %v; want it emptied", slice.Endpoints, err)
	}
	if err := c.Get(ctx, req.NamespacedName, claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Connection.ServiceName != "build" {
		t.Errorf("connection %+v; want the claim's own Service", claim.Status.Connection)
	}
}
