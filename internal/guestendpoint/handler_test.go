package guestendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/render"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

const (
	tokenA = "token-of-machine-a-0123456789abcdef"
	tokenB = "token-of-machine-b-0123456789abcdef"
	tokenC = "token-of-machine-c-0123456789abcdef"
	tokenE = "token-of-machine-e-0123456789abcdef"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func machine(name, token string) *macvirtv1alpha1.MacMachine {
	return &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a",
			Annotations: map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: guestprotocol.HashToken(token)}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"},
	}
}

// setup returns a handler over machines a (bound to a claim with a key) and
// b, and the client to inspect what it wrote.
func setup(t *testing.T) (*Handler, client.Client) {
	t.Helper()
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team-a", UID: "claim-uid"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA dev@example"}}}
	a := machine("a", tokenA)
	a.UID = "machine-a-uid"
	a.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-a", Name: "build", UID: "claim-uid"}
	claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-a", Name: "a", UID: a.UID}
	// c names the claim, but the claim does not name c: a machine made to
	// look bound.
	c := machine("c", tokenC)
	c.UID = "machine-c-uid"
	c.Spec.ClaimRef = a.Spec.ClaimRef.DeepCopy()
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	class.Spec.Lifecycle.HeartbeatTimeout = &metav1.Duration{Duration: 2 * time.Minute}
	// e lives in another namespace and names a claim that names it back (a
	// binding made before admission guarded claimRef): it is no pool's
	// machine, so it is not the claim's either.
	legacy := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "team-a", UID: "legacy-uid"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAB legacy@example"}}}
	e := machine("e", tokenE)
	e.Namespace, e.UID = "evil", "machine-e-uid"
	e.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-a", Name: "legacy", UID: legacy.UID}
	legacy.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "evil", Name: "e", UID: e.UID}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(a, machine("b", tokenB), c, e, claim, legacy, class).
		WithStatusSubresource(&macvirtv1alpha1.MacMachine{}).Build()
	return &Handler{Client: cl, Clock: clocktesting.NewFakePassiveClock(now)}, cl
}

func heartbeat(name string) []byte {
	b, _ := json.Marshal(guestprotocol.Heartbeat{Machine: guestprotocol.MachineRef{Namespace: "team-a", Name: name}, AgentVersion: "1.0.0",
		OSVersion: "14.5", OSBuild: "23F79", Hostname: "mac", BootTime: now.Add(-time.Hour), IPAddresses: []string{"10.0.2.2"},
		SSHHostKeys: []string{hostKey}})
	return b
}

// hostKey is an ed25519 public key, as in /etc/ssh/ssh_host_ed25519_key.pub.
const hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0Ow6DQP+//k6m8zioktAbUb0Su/x93h9rtsTyq+kAs"

// post sends a heartbeat body with a token.
func post(h http.Handler, token string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, guestprotocol.HeartbeatPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// guestOfA is machine a's status.guest.
func guestOfA(t *testing.T, c client.Client) *macvirtv1alpha1.GuestStatus {
	t.Helper()
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "a"}, m); err != nil {
		t.Fatal(err)
	}
	return m.Status.Guest
}

func TestHeartbeatIsRecordedAndAnsweredWithTheDesiredState(t *testing.T) {
	h, c := setup(t)
	rec := post(h, tokenA, heartbeat("a"))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var state guestprotocol.DesiredState
	if err := json.Unmarshal(rec.Body.Bytes(), &state); err != nil {
		t.Fatal(err)
	}
	if state.Hostname != "a" || state.SSHUser != "admin" || len(state.SSHAuthorizedKeys) != 1 || state.HeartbeatIntervalSeconds != 30 {
		t.Errorf("desired state %+v", state)
	}
	g := guestOfA(t, c)
	if g == nil || !g.LastHeartbeat.Time.Equal(now) || g.OSVersion != "14.5" || g.OSBuild != "23F79" || g.AgentVersion != "1.0.0" ||
		g.BootTime == nil || len(g.IPAddresses) != 1 || len(g.SSHHostKeys) != 1 || g.SSHHostKeys[0] != hostKey {
		t.Errorf("status.guest %+v", g)
	}
	// Unbound machine b gets no keys.
	rec = post(h, tokenB, heartbeat("b"))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"sshAuthorizedKeys":[]`) {
		t.Errorf("machine b: %d %s", rec.Code, rec.Body)
	}
	// A token good for b is no good for a; the refusal is counted.
	refused := testutil.ToFloat64(heartbeats.WithLabelValues(guestprotocol.ReasonUnauthorized))
	if rec := post(h, tokenB, heartbeat("a")); rec.Code != http.StatusUnauthorized {
		t.Errorf("machine a with b's token: %d %s", rec.Code, rec.Body)
	}
	if got := testutil.ToFloat64(heartbeats.WithLabelValues(guestprotocol.ReasonUnauthorized)); got != refused+1 {
		t.Errorf("macvirt_agent_heartbeats_total{result=Unauthorized} went from %v to %v, want one more", refused, got)
	}
	// Machine e, in a namespace that is neither the claim's nor a pool's,
	// gets no keys though the claim names it.
	body, _ := json.Marshal(guestprotocol.Heartbeat{Machine: guestprotocol.MachineRef{Namespace: "evil", Name: "e"}, AgentVersion: "1.0.0"})
	if rec := post(h, tokenE, body); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"sshAuthorizedKeys":[]`) {
		t.Errorf("machine e, made by hand in another namespace, was answered %d %s", rec.Code, rec.Body)
	}
	// Machine c names the claim, which names a: no keys either.
	rec = post(h, tokenC, heartbeat("c"))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"sshAuthorizedKeys":[]`) {
		t.Errorf("machine c, which only names the claim, was answered %d %s", rec.Code, rec.Body)
	}
}

// An agent's interval suits the heartbeatTimeout its machine is held to:
// that of its recorded revision once its class changed or went.
func TestIntervalFollowsTheMachinesRevision(t *testing.T) {
	h, c := setup(t)
	h.Classes = classhistory.Resolver{Snapshots: c, Namespace: "macvirt-system"}
	ctx := context.Background()
	old := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	old.Spec.Resources.CPU = 2
	old.Spec.Lifecycle.HeartbeatTimeout = &metav1.Duration{Duration: 40 * time.Second}
	snap, err := classhistory.New("macvirt-system", old, render.ClassRevision(old))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	a := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "a"}, a); err != nil {
		t.Fatal(err)
	}
	a.Spec.ClassRevision = render.ClassRevision(old)
	if err := c.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	interval := func() int {
		rec := post(h, tokenA, heartbeat("a"))
		var state guestprotocol.DesiredState
		if err := json.Unmarshal(rec.Body.Bytes(), &state); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		return state.HeartbeatIntervalSeconds
	}
	if got := interval(); got != 10 {
		t.Errorf("class changed: interval %ds, want 10s, a quarter of the 40s of the machine's revision", got)
	}
	if err := c.Delete(ctx, &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}); err != nil {
		t.Fatal(err)
	}
	if got := interval(); got != 10 {
		t.Errorf("class deleted: interval %ds, want 10s, a quarter of the 40s of the machine's revision", got)
	}
}

func TestRejectionsWriteNothing(t *testing.T) {
	oversized := []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"` + strings.Repeat("x", guestprotocol.MaxBodyBytes) + `"}`)
	tests := map[string]struct {
		method, path, token, contentType string
		body                             []byte
		code                             int
		reason                           string
	}{
		"unknown machine":              {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", heartbeat("nope"), 401, guestprotocol.ReasonUnauthorized},
		"wrong token":                  {"POST", guestprotocol.HeartbeatPath, "guessed", "application/json", heartbeat("a"), 401, guestprotocol.ReasonUnauthorized},
		"another machine's token":      {"POST", guestprotocol.HeartbeatPath, tokenB, "application/json", heartbeat("a"), 401, guestprotocol.ReasonUnauthorized},
		"no token":                     {"POST", guestprotocol.HeartbeatPath, "", "application/json", heartbeat("a"), 401, guestprotocol.ReasonUnauthorized},
		"oversized body":               {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", oversized, 413, guestprotocol.ReasonTooLarge},
		"malformed JSON":               {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":`), 400, guestprotocol.ReasonMalformed},
		"unknown field":                {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"1","root":true}`), 400, guestprotocol.ReasonMalformed},
		"trailing data":                {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", append(heartbeat("a"), []byte(`{}`)...), 400, guestprotocol.ReasonMalformed},
		"a host key that is not a key": {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"1","sshHostKeys":["ssh-ed25519 bm90IGEga2V5"]}`), 400, guestprotocol.ReasonMalformed},
		"nine host keys":               {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"1","sshHostKeys":["` + strings.Repeat(hostKey+`","`, 8) + hostKey + `"]}`), 400, guestprotocol.ReasonMalformed},
		"a host key with a comment":    {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"1","sshHostKeys":["` + hostKey + ` root@mac"]}`), 400, guestprotocol.ReasonMalformed},
		"not an IP address":            {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"},"agentVersion":"1","ipAddresses":["evil"]}`), 400, guestprotocol.ReasonMalformed},
		"no agent version":             {"POST", guestprotocol.HeartbeatPath, tokenA, "application/json", []byte(`{"machine":{"namespace":"team-a","name":"a"}}`), 400, guestprotocol.ReasonMalformed},
		"wrong content type":           {"POST", guestprotocol.HeartbeatPath, tokenA, "text/plain", heartbeat("a"), 415, guestprotocol.ReasonUnsupported},
		"GET":                          {"GET", guestprotocol.HeartbeatPath, tokenA, "application/json", nil, 405, guestprotocol.ReasonMethodNotAllowed},
		"unknown path":                 {"POST", "/v3/heartbeat", tokenA, "application/json", heartbeat("a"), 404, guestprotocol.ReasonUnsupported},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, c := setup(t)
			req := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var e guestprotocol.Error
			if rec.Code != tc.code || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", rec.Code, rec.Body, tc.code, tc.reason)
			}
			if g := guestOfA(t, c); g != nil {
				t.Errorf("a rejected request wrote status.guest: %+v", g)
			}
		})
	}
}

func TestHeartbeatsAreRateLimitedPerMachine(t *testing.T) {
	h, _ := setup(t)
	h.Rate, h.Burst = 0.001, 2
	for i, want := range []int{200, 200, 429} {
		if rec := post(h, tokenA, heartbeat("a")); rec.Code != want {
			t.Fatalf("heartbeat %d: %d, want %d", i, rec.Code, want)
		}
	}
	if rec := post(h, tokenB, heartbeat("b")); rec.Code != 200 {
		t.Errorf("machine b was limited by machine a's heartbeats: %d", rec.Code)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(heartbeat("a"))
	f.Add([]byte(`{"machine":{"namespace":"n","name":"m"},"agentVersion":"1","ipAddresses":["::1","10.0.0.1"],"bootTime":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"machine":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		hb, err := guestprotocol.DecodeHeartbeat(bytes.NewReader(body))
		if err != nil {
			return
		}
		if len(body) > guestprotocol.MaxBodyBytes || hb.Machine.Name == "" || hb.AgentVersion == "" || len(hb.IPAddresses) > guestprotocol.MaxIPAddresses {
			t.Fatalf("accepted a heartbeat outside the limits: %q", body)
		}
	})
}

// TestLimitersOfIdleMachinesAreForgotten: once minSweepAt limiters exist,
// adding one forgets those that are full again (deleted or quiet machines)
// and keeps those still limiting.
func TestLimitersOfIdleMachinesAreForgotten(t *testing.T) {
	h := &Handler{Rate: 1, Burst: 1}
	key := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "n", Name: fmt.Sprint("m", i)}
	}
	t0 := time.Unix(1_000_000, 0)
	for i := range minSweepAt {
		if !h.limiter(key(i), t0).AllowN(t0, 1) {
			t.Fatal("a new limiter refused its first heartbeat")
		}
	}
	if len(h.limiters) != minSweepAt {
		t.Fatalf("%d limiters before the sweep, want %d", len(h.limiters), minSweepAt)
	}
	// Ten seconds later every limiter is full again: all are forgotten.
	t1 := t0.Add(10 * time.Second)
	h.limiter(key(-1), t1)
	if len(h.limiters) != 1 {
		t.Fatalf("%d limiters after sweeping full ones, want only the new one", len(h.limiters))
	}
	// A limiter still limiting survives a sweep, and still limits.
	if !h.limiter(key(0), t1).AllowN(t1, 1) {
		t.Fatal("a refilled machine was refused")
	}
	for i := 1; len(h.limiters) < minSweepAt; i++ {
		h.limiter(key(i), t1)
	}
	h.limiter(key(-2), t1)
	if _, ok := h.limiters[key(0)]; !ok {
		t.Fatal("the sweep forgot a limiter that was still limiting")
	}
	if h.limiter(key(0), t1).AllowN(t1, 1) {
		t.Error("machine m0 got a second heartbeat within a second")
	}
	if len(h.limiters) != 2 {
		t.Errorf("%d limiters after the second sweep, want the limiting one and the new one", len(h.limiters))
	}
}

// The interval an agent assumes before its first answer is the one the
// operator gives under the default heartbeatTimeout.
func TestTheAgentsDefaultIntervalIsTheOperatorsDefault(t *testing.T) {
	if got := guestprotocol.HeartbeatInterval(macvirtv1alpha1.DefaultHeartbeatTimeout); got != guestprotocol.DefaultHeartbeatInterval {
		t.Errorf("HeartbeatInterval(default heartbeatTimeout) = %s, protocol.DefaultHeartbeatInterval = %s", got, guestprotocol.DefaultHeartbeatInterval)
	}
	for timeout, want := range map[time.Duration]time.Duration{10 * time.Second: 5 * time.Second, time.Minute: 15 * time.Second, time.Hour: time.Minute} {
		if got := guestprotocol.HeartbeatInterval(timeout); got != want {
			t.Errorf("HeartbeatInterval(%s) = %s, want %s", timeout, got, want)
		}
	}
}

// The endpoint owns status.guest and nothing else of a machine's status
// (the machine controller owns the rest): its patch names only guest, so a
// heartbeat never overwrites the phase or conditions, nor they the
// heartbeat.
func TestAHeartbeatWritesStatusGuestOnly(t *testing.T) {
	h, c := setup(t)
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "a"}, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Phase = macvirtv1alpha1.MachineBooting
	m.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonBooting, LastTransitionTime: metav1.NewTime(now)}}
	if err := c.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	var patches [][]byte
	h.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			patches = append(patches, data)
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	clock := clocktesting.NewFakeClock(now)
	h.Clock = clock
	for range 2 {
		if rec := post(h, tokenA, heartbeat("a")); rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		clock.Step(10 * time.Second)
	}
	if len(patches) != 2 {
		t.Fatalf("%d status patches; want one per heartbeat", len(patches))
	}
	for _, p := range patches {
		var body map[string]map[string]json.RawMessage
		if err := json.Unmarshal(p, &body); err != nil {
			t.Fatalf("patch %s: %v", p, err)
		}
		if len(body) != 1 || len(body["status"]) != 1 || body["status"]["guest"] == nil {
			t.Errorf("patch %s; want status.guest only", p)
		}
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "a"}, m); err != nil {
		t.Fatal(err)
	}
	if m.Status.Phase != macvirtv1alpha1.MachineBooting || len(m.Status.Conditions) != 1 {
		t.Errorf("the machine controller's fields changed: phase %q, conditions %+v", m.Status.Phase, m.Status.Conditions)
	}
}

// Text the guest writes is recorded without what a terminal would act on:
// it reaches the claim's conditions and kubectl mac, and people read those
// in terminals.
func TestWhatTheGuestWritesIsRecordedWithoutEscapeSequences(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	exit := 1
	hb := guestprotocol.HeartbeatV2{Heartbeat: guestprotocol.Heartbeat{Machine: guestprotocol.MachineRef{Namespace: "team-a", Name: "a"},
		AgentVersion: "1.0.0\x1b[8m", OSVersion: "14.5\x1b]0;evil\x07", OSBuild: "23F79\u009b2J", Hostname: "mac\r\x1b[2K",
		ApplyError: "dscl: \x1b[31mpermission denied\x1b[0m\x1b]0;pwned\x07 for «admin» 🍎\r\n\x1b[1A\x1b[2Kall fine"},
		Tasks: []guestprotocol.TaskReport{{ID: "claim-uid-class", State: guestprotocol.TaskFailed, StartedAt: now, ExitCode: &exit,
			OutputTail: "step 1 \x1b[32mok\x1b[0m\n\tstep 2 \x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\u009b31mfailed\n",
			Message:    "the script \x1bcfailed\x1b]8;;https://evil.example\x1b\\ here\x1b]8;;\x1b\\"}}}
	body, _ := json.Marshal(hb)
	req := httptest.NewRequest(http.MethodPost, guestprotocol.HeartbeatPathV2, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	g := guestOfA(t, c)
	for field, v := range map[string]struct{ got, want string }{
		"agentVersion": {g.AgentVersion, "1.0.0"},
		"osVersion":    {g.OSVersion, "14.5"},
		"osBuild":      {g.OSBuild, "23F79"},
		"hostname":     {g.Hostname, "mac"},
		"applyError":   {g.ApplyError, "dscl: permission denied for «admin» 🍎\nall fine"},
	} {
		if v.got != v.want {
			t.Errorf("status.guest.%s = %q, want %q", field, v.got, v.want)
		}
	}
	if len(g.Tasks) != 1 {
		t.Fatalf("recorded tasks %+v, want the class's part", g.Tasks)
	}
	if got, want := g.Tasks[0].OutputTail, "step 1 ok\n\tstep 2 failed\n"; got != want {
		t.Errorf("outputTail = %q, want %q", got, want)
	}
	if got, want := g.Tasks[0].Message, "the script failed here"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestStaleIdentity(t *testing.T) {
	mk := func(resumes, heardAt int32) *macvirtv1alpha1.MacMachine {
		m := &macvirtv1alpha1.MacMachine{}
		m.Status.Host = &macvirtv1alpha1.HostVMStatus{Resumes: resumes}
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{Resumes: heardAt, SSHHostKeys: []string{"ssh-ed25519 OLD"}}
		return m
	}
	for name, tc := range map[string]struct {
		m       *macvirtv1alpha1.MacMachine
		keys    []string
		refused bool
	}{
		"a resumed guest with the old key is refused":       {m: mk(1, 0), keys: []string{"ssh-ed25519 OLD"}, refused: true},
		"one old key among new ones is refused":             {m: mk(1, 0), keys: []string{"ssh-ed25519 NEW", "ssh-ed25519 OLD"}, refused: true},
		"a second resume is judged as the first":            {m: mk(2, 1), keys: []string{"ssh-ed25519 OLD"}, refused: true},
		"a resumed guest with new keys is heard":            {m: mk(1, 0), keys: []string{"ssh-ed25519 NEW"}},
		"a guest never suspended is heard":                  {m: mk(0, 0), keys: []string{"ssh-ed25519 OLD"}},
		"once heard after the resume, its keys are its own": {m: mk(1, 1), keys: []string{"ssh-ed25519 OLD"}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := staleIdentity(tc.m, tc.keys); (got != "") != tc.refused {
				t.Fatalf("staleIdentity = %q; want refused %v", got, tc.refused)
			}
		})
	}
}

// A steady guest's heartbeat is written about every other interval: one
// that says nothing new, from a guest judged ready, is answered and not
// written while the written one is younger than the gap (37.5s for the
// class's 2m timeout and 30s interval). What a guest says anew, and every
// beat of a guest not judged ready, is written at once.
func TestASteadyGuestsHeartbeatIsWrittenAboutEveryOtherInterval(t *testing.T) {
	for name, tc := range map[string]struct {
		ready bool
		// written: which of the beats at 0s, 30s, 60s, 90s, 120s and (with
		// a new address) 125s are written.
		written []bool
	}{
		"judged ready":     {ready: true, written: []bool{true, false, true, false, true, true}},
		"not judged ready": {ready: false, written: []bool{true, true, true, true, true, true}},
	} {
		t.Run(name, func(t *testing.T) {
			h, c := setup(t)
			ctx := context.Background()
			m := &macvirtv1alpha1.MacMachine{}
			if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "a"}, m); err != nil {
				t.Fatal(err)
			}
			status := metav1.ConditionFalse
			if tc.ready {
				status = metav1.ConditionTrue
			}
			m.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionGuestAgentReady, Status: status,
				Reason: macvirtv1alpha1.ReasonAsExpected, LastTransitionTime: metav1.NewTime(now)}}
			if err := c.Status().Update(ctx, m); err != nil {
				t.Fatal(err)
			}
			patches := 0
			h.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					patches++
					return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			})
			clock := clocktesting.NewFakeClock(now)
			// The limiter runs on the real clock: the six beats come at once.
			h.Clock, h.Burst = clock, 10
			var got []bool
			for i, at := range []time.Duration{0, 30 * time.Second, 60 * time.Second, 90 * time.Second, 120 * time.Second, 125 * time.Second} {
				clock.SetTime(now.Add(at))
				body := heartbeat("a")
				if i == 5 {
					var hb guestprotocol.Heartbeat
					_ = json.Unmarshal(body, &hb)
					hb.IPAddresses = []string{"10.0.2.3"}
					body, _ = json.Marshal(hb)
				}
				before := patches
				if rec := post(h, tokenA, body); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"hostname":"a"`) {
					t.Fatalf("beat at %s: %d %s", at, rec.Code, rec.Body)
				}
				got = append(got, patches > before)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.written) {
				t.Errorf("written %v; want %v", got, tc.written)
			}
			if g := guestOfA(t, c); !g.LastHeartbeat.Time.Equal(now.Add(125*time.Second)) || g.IPAddresses[0] != "10.0.2.3" || g.HeartbeatIntervalSeconds != 30 {
				t.Errorf("status.guest %+v", g)
			}
		})
	}
}
