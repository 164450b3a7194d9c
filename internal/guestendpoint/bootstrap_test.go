package guestendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

const registrationToken = "ghs_registration-token-value"

// withBootstrap gives machine a's claim a bootstrap of two parts (the
// class's, then the claim's, whose environment comes from a Secret) and
// makes the Secret.
func withBootstrap(t *testing.T, h *Handler, c client.Client) {
	t.Helper()
	ctx := context.Background()
	class := &macvirtv1alpha1.MacClass{}
	if err := c.Get(ctx, client.ObjectKey{Name: "sonoma"}, class); err != nil {
		t.Fatal(err)
	}
	class.Spec.Bootstrap = &macvirtv1alpha1.Bootstrap{User: "root", Script: &macvirtv1alpha1.BootstrapScript{Inline: "scutil --get ComputerName"}}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "build"}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.Bootstrap = &macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "./register --token \"$TOKEN\""},
		Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "TOKEN", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "runner", Key: "token"}}}}
	pending := macvirtv1alpha1.TaskOutcome{State: macvirtv1alpha1.BootstrapPending}
	claim.Status.Bootstrap = []macvirtv1alpha1.BootstrapPartStatus{
		{Name: macvirtv1alpha1.BootstrapPartClass, TaskOutcome: pending, HoldReady: true},
		{Name: macvirtv1alpha1.BootstrapPartClaim, TaskOutcome: pending, HoldReady: true}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "runner"}, Data: map[string][]byte{"token": []byte(registrationToken)}}
	for _, err := range []error{c.Update(ctx, class), c.Update(ctx, claim), c.Create(ctx, secret)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	h.Sources = c
}

func postV2(t *testing.T, h http.Handler, reports ...guestprotocol.TaskReport) (int, *guestprotocol.DesiredStateV2) {
	t.Helper()
	var hb guestprotocol.Heartbeat
	if err := json.Unmarshal(heartbeat("a"), &hb); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(guestprotocol.HeartbeatV2{Heartbeat: hb, Tasks: reports})
	req := httptest.NewRequest(http.MethodPost, guestprotocol.HeartbeatPathV2, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	state := &guestprotocol.DesiredStateV2{}
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), state); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, state
}

func TestAV2HeartbeatIsHandedThePartsInOrderOnceEach(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	code, state := postV2(t, h)
	if code != http.StatusOK || state.Binding != "claim-uid" || len(state.Tasks) != 1 {
		t.Fatalf("first heartbeat: %d %+v, want the binding and one task", code, state)
	}
	class := state.Tasks[0]
	if class.ID != "claim-uid-class" || class.User != "root" || class.Script != "scutil --get ComputerName" || class.TimeoutSeconds != 1800 {
		t.Errorf("the class's part: %+v", class)
	}
	if g := recordedOfA(t, c); g.ProtocolVersion != guestprotocol.VersionV2 || len(g.Tasks) != 0 {
		t.Errorf("recorded %+v, want protocol v2 and no task yet", g)
	}
	// Taken: not handed again while it runs.
	running := guestprotocol.TaskReport{ID: "claim-uid-class", State: guestprotocol.TaskRunning, StartedAt: now}
	if _, state := postV2(t, h, running); len(state.Tasks) != 0 {
		t.Errorf("a running part was handed again: %+v", state.Tasks)
	}
	// Once it succeeded, the claim's part follows, its Secret's value only
	// in the answer.
	exit := 0
	done := guestprotocol.TaskReport{ID: "claim-uid-class", State: guestprotocol.TaskSucceeded, StartedAt: now, ExitCode: &exit, DurationMillis: 1500, OutputTail: "mac-a\n"}
	_, state = postV2(t, h, done, guestprotocol.TaskReport{ID: "other-binding-claim", State: guestprotocol.TaskRunning, StartedAt: now})
	if len(state.Tasks) != 1 || state.Tasks[0].ID != "claim-uid-claim" || state.Tasks[0].User != guestprotocol.DefaultSSHUser {
		t.Fatalf("after the class's part: %+v, want the claim's part as admin", state.Tasks)
	}
	if env := state.Tasks[0].Env; len(env) != 1 || env[0] != (guestprotocol.EnvVar{Name: "TOKEN", Value: registrationToken}) {
		t.Errorf("the claim's environment: %+v", env)
	}
	if m := state.Tasks[0].Mask; len(m) != 1 || m[0] != registrationToken {
		t.Errorf("the Secret's value is not masked: %v", m)
	}
	g := recordedOfA(t, c)
	if len(g.Tasks) != 1 || g.Tasks[0].ID != "claim-uid-class" || g.Tasks[0].State != macvirtv1alpha1.BootstrapSucceeded ||
		g.Tasks[0].Duration == nil || g.Tasks[0].Duration.Seconds() != 1.5 || *g.Tasks[0].ExitCode != 0 {
		t.Errorf("recorded tasks %+v, want the class's part Succeeded (another binding's dropped)", g.Tasks)
	}
	raw, _ := json.Marshal(g)
	if strings.Contains(string(raw), registrationToken) {
		t.Errorf("status.guest carries the Secret's value: %s", raw)
	}
}

func TestAPartWhoseSecretCannotBeReadWaitsSayingWhy(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	h.Sources = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, nil)
		}
		return cl.Get(ctx, key, obj, opts...)
	}})
	exit := 0
	_, state := postV2(t, h, guestprotocol.TaskReport{ID: "claim-uid-class", State: guestprotocol.TaskSucceeded, StartedAt: now, ExitCode: &exit})
	if len(state.Tasks) != 0 {
		t.Fatalf("a part whose Secret cannot be read was handed over: %+v", state.Tasks)
	}
	g := recordedOfA(t, c)
	if len(g.Tasks) != 2 || g.Tasks[1].State != macvirtv1alpha1.BootstrapPending ||
		!strings.Contains(g.Tasks[1].Message, "may not read Secrets in namespace team-a") {
		t.Errorf("recorded %+v, want the claim's part Pending saying the operator may not read the Secret", g.Tasks)
	}
	if state.HeartbeatIntervalSeconds != 2 {
		t.Errorf("a part waiting for its source asks the agent back in %d s, want 2 (a runner's JIT Secret follows its claim)", state.HeartbeatIntervalSeconds)
	}
}

func TestAClaimsPartAsRootWaitsOnceTheClassNoLongerAllowsIt(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "build"}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.Bootstrap.User = "root"
	if err := c.Update(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	exit := 0
	_, state := postV2(t, h, guestprotocol.TaskReport{ID: "claim-uid-class", State: guestprotocol.TaskSucceeded, StartedAt: now, ExitCode: &exit})
	if len(state.Tasks) != 0 {
		t.Fatalf("a root part the class does not allow was handed over: %+v", state.Tasks)
	}
	if g := recordedOfA(t, c); len(g.Tasks) != 2 || !strings.Contains(g.Tasks[1].Message, "allowRootBootstrap") {
		t.Errorf("recorded %+v, want the claim's part waiting on allowRootBootstrap", g.Tasks)
	}
}

func TestAV1HeartbeatIsRecordedAsV1AndHandedNoTask(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	rec := post(h, tokenA, heartbeat("a"))
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "tasks") || strings.Contains(rec.Body.String(), "binding") {
		t.Fatalf("v1 answer %d %s, want the v1 desired state only", rec.Code, rec.Body.String())
	}
	if g := recordedOfA(t, c); g.ProtocolVersion != guestprotocol.Version {
		t.Errorf("recorded protocol %q, want v1", g.ProtocolVersion)
	}
}

// recordedOfA is machine a's status.guest.
func recordedOfA(t *testing.T, c client.Client) *macvirtv1alpha1.GuestStatus {
	t.Helper()
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "a"}, m); err != nil {
		t.Fatal(err)
	}
	return m.Status.Guest
}

// A task's report is recorded at the API's precision, so the same report
// heard again reads as unchanged and a steady guest running a task is not
// written at every heartbeat.
func TestATaskReportReadsBackUnchanged(t *testing.T) {
	code := 0
	r := guestprotocol.TaskReport{ID: "claim-uid/claim", State: "Running", OutputTail: "building\n",
		StartedAt: time.Date(2026, 12, 7, 12, 0, 0, 123456789, time.UTC), ExitCode: &code}
	recorded := guestTask(r)
	raw, err := json.Marshal(recorded)
	if err != nil {
		t.Fatal(err)
	}
	var back macvirtv1alpha1.GuestTaskStatus
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if again := guestTask(r); !equality.Semantic.DeepEqual(&back, &again) {
		t.Errorf("the report as read back %+v differs from the same report heard again %+v", back, again)
	}
}
