package guestendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

var machineA = types.NamespacedName{Namespace: "team-a", Name: "a"}

func watchRequest(token, revision string) *http.Request {
	body, _ := json.Marshal(guestprotocol.WatchRequest{Machine: guestprotocol.MachineRef{Namespace: "team-a", Name: "a"}, Revision: revision})
	req := httptest.NewRequest(http.MethodPost, guestprotocol.WatchPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// watch sends a watch of machine a and returns the code and the revision
// answered.
func watch(t *testing.T, h http.Handler, token, revision string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, watchRequest(token, revision))
	answer := guestprotocol.WatchAnswer{}
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
			t.Fatal(err)
		}
	}
	return rec.Code, answer.Revision
}

// watchAsync starts a watch and returns where its answer arrives.
func watchAsync(t *testing.T, h http.Handler, revision string) <-chan string {
	t.Helper()
	out := make(chan string, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, watchRequest(tokenA, revision))
		answer := guestprotocol.WatchAnswer{}
		_ = json.Unmarshal(rec.Body.Bytes(), &answer)
		out <- answer.Revision
	}()
	return out
}

func TestAWatchAnswersTheRevisionTheNextHeartbeatGets(t *testing.T) {
	h, _ := setup(t)
	code, state := postV2(t, h)
	if code != http.StatusOK || state.Revision == "" {
		t.Fatalf("v2 heartbeat: %d, revision %q", code, state.Revision)
	}
	if code, rev := watch(t, h, tokenA, ""); code != http.StatusOK || rev != state.Revision {
		t.Fatalf("a watch with no revision: %d %q, want 200 and the heartbeat's %q at once", code, rev, state.Revision)
	}
	// Nothing changed: held for the hold, then the same revision.
	h.WatchHold = 200 * time.Millisecond
	if code, rev := watch(t, h, tokenA, state.Revision); code != http.StatusOK || rev != state.Revision {
		t.Fatalf("an unchanged watch: %d %q, want 200 %q", code, rev, state.Revision)
	}
}

func TestAWatchHandsNoTaskTwice(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	h.WatchHold = 200 * time.Millisecond
	_, handed := postV2(t, h)
	if len(handed.Tasks) != 1 {
		t.Fatalf("the first heartbeat was handed %d tasks, want the class's part", len(handed.Tasks))
	}
	// The agent took the task and has not reported it yet: status.guest
	// does not name it, and the watch must not call that a change.
	if _, rev := watch(t, h, tokenA, handed.Revision); rev != handed.Revision {
		t.Fatalf("a watch right after the task was handed answered %q, want the unchanged %q", rev, handed.Revision)
	}
	id := handed.Tasks[0].ID
	_, running := postV2(t, h, guestprotocol.TaskReport{ID: id, State: guestprotocol.TaskRunning, StartedAt: now})
	if len(running.Tasks) != 0 || running.Revision == handed.Revision {
		t.Fatalf("once reported running: %d tasks, revision %q (was %q)", len(running.Tasks), running.Revision, handed.Revision)
	}
	if _, rev := watch(t, h, tokenA, running.Revision); rev != running.Revision {
		t.Fatalf("a watch while the task runs answered %q, want the unchanged %q", rev, running.Revision)
	}
}

func TestAHeldWatchIsAnsweredWhenTheClaimChanges(t *testing.T) {
	h, c := setup(t)
	_, state := postV2(t, h)
	answer := watchAsync(t, h, state.Revision)
	for deadline := time.Now().Add(10 * time.Second); h.Watching() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watch is not held")
		}
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "team-a", Name: "build"}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.SSHAuthorizedKeys = append(claim.Spec.SSHAuthorizedKeys, "ssh-ed25519 AAAC second@example")
	if err := c.Update(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	h.Changed(machineA)
	var rev string
	select {
	case rev = <-answer:
	case <-time.After(30 * time.Second):
		t.Fatal("the held watch was not answered after the claim's keys changed")
	}
	_, next := postV2(t, h)
	if rev == state.Revision || rev != next.Revision || len(next.SSHAuthorizedKeys) != 2 {
		t.Fatalf("the watch answered %q; before %q, the next heartbeat %q with keys %v", rev, state.Revision, next.Revision, next.SSHAuthorizedKeys)
	}
	for deadline := time.Now().Add(10 * time.Second); h.Watching() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches held after the answer, want 0", h.Watching())
		}
	}
}

// A watch is held from its authentication to its answer, also between two
// looks (which are spaced by minLook): the gauge and Watching count it
// while changes that change nothing keep it looking.
func TestAWatchBetweenLooksIsStillHeld(t *testing.T) {
	h, _ := setup(t)
	h.WatchHold = 3 * time.Second
	_, state := postV2(t, h)
	answer := watchAsync(t, h, state.Revision)
	for deadline := time.Now().Add(10 * time.Second); h.Watching() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watch is not held")
		}
	}
	for i := 0; i < 40; i++ {
		h.Changed(machineA)
		time.Sleep(25 * time.Millisecond)
		if n := h.Watching(); n != 1 {
			t.Fatalf("after %d changes that change nothing, %d watches held, want 1", i+1, n)
		}
	}
	if rev := <-answer; rev != state.Revision {
		t.Fatalf("the watch answered %q, want the unchanged %q", rev, state.Revision)
	}
}

// A part waiting for its Secret (which the operator does not watch) is
// looked at again while the watch is held.
func TestAHeldWatchTakesASourceMadeLater(t *testing.T) {
	h, c := setup(t)
	withBootstrap(t, h, c)
	_, handed := postV2(t, h)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "runner"}}
	if err := c.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	done := guestprotocol.TaskReport{ID: handed.Tasks[0].ID, State: guestprotocol.TaskSucceeded, StartedAt: now, ExitCode: new(int)}
	_, waiting := postV2(t, h, done)
	if len(waiting.Tasks) != 0 {
		t.Fatalf("the claim's part was handed without its Secret: %+v", waiting.Tasks)
	}
	answer := watchAsync(t, h, waiting.Revision)
	time.Sleep(2 * pendingRecheck)
	secret.Data = map[string][]byte{"token": []byte(registrationToken)}
	secret.ResourceVersion = ""
	if err := c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	select {
	case rev := <-answer:
		if rev == waiting.Revision {
			t.Fatal("the watch answered no change once the Secret was there")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held watch did not take the Secret made while it was held")
	}
	if _, next := postV2(t, h, done); len(next.Tasks) != 1 {
		t.Fatalf("the heartbeat after the push was handed %d tasks, want the claim's part", len(next.Tasks))
	}
}

func TestWatchRefusalsAndTheirOwnLimit(t *testing.T) {
	h, _ := setup(t)
	if code, _ := watch(t, h, tokenB, ""); code != http.StatusUnauthorized {
		t.Fatalf("another machine's token: %d, want 401", code)
	}
	req := watchRequest(tokenA, "")
	req.Body = http.NoBody
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("an empty body: %d, want 400", rec.Code)
	}
	req = httptest.NewRequest(http.MethodGet, guestprotocol.WatchPath, nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", rec.Code)
	}
	codes := []int{}
	for range 7 {
		code, _ := watch(t, h, tokenA, "")
		codes = append(codes, code)
	}
	if codes[0] != http.StatusOK || codes[6] != http.StatusTooManyRequests {
		t.Fatalf("7 watches at once: %v, want 200 first and 429 last (bursts of 5)", codes)
	}
	// The watches' limit is not the heartbeats'.
	if code, _ := postV2(t, h); code != http.StatusOK {
		t.Fatalf("a heartbeat after the watches were limited: %d, want 200", code)
	}
}

// The endpoint's server times reads and writes out for requests answered
// at once; a watch outlives both.
func TestAWatchOutlivesTheServersTimeouts(t *testing.T) {
	h, _ := setup(t)
	_, state := postV2(t, h)
	h.WatchHold = 900 * time.Millisecond
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	srv.StartTLS()
	defer srv.Close()
	body, _ := json.Marshal(guestprotocol.WatchRequest{Machine: guestprotocol.MachineRef{Namespace: "team-a", Name: "a"}, Revision: state.Revision})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+guestprotocol.WatchPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("a watch held beyond the server's timeouts: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	answer := guestprotocol.WatchAnswer{}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK || answer.Revision != state.Revision {
		t.Fatalf("a watch held beyond the server's timeouts: %d %q %v", resp.StatusCode, answer.Revision, err)
	}
}

func TestAWatchWaitsForTheCacheToShowAHeartbeatsWrite(t *testing.T) {
	var ws watches
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	if !ws.settledAt(machineA, "7").IsZero() {
		t.Fatal("a machine never written is settled")
	}
	ws.wrote(machineA, "9", at)
	if got := ws.settledAt(machineA, "9"); !got.IsZero() {
		t.Fatalf("the version written: settled at %v, want at once", got)
	}
	if got := ws.settledAt(machineA, "8"); !got.Equal(at.Add(settle)) {
		t.Fatalf("another version: settled at %v, want %v", got, at.Add(settle))
	}
}

// One machine's token holds at most maxHeldPerMachine watches.
func TestAMachineHoldsAtMostTwoWatches(t *testing.T) {
	h, _ := setup(t)
	h.WatchHold = 2 * time.Second
	_, state := postV2(t, h)
	for range maxHeldPerMachine {
		_ = watchAsync(t, h, state.Revision)
	}
	for deadline := time.Now().Add(10 * time.Second); h.Watching() < maxHeldPerMachine; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d watches held, want %d", h.Watching(), maxHeldPerMachine)
		}
	}
	if code, _ := watch(t, h, tokenA, state.Revision); code != http.StatusTooManyRequests {
		t.Fatalf("a watch beyond %d: %d, want 429", maxHeldPerMachine, code)
	}
	h.Changed(machineA)
}

// A guest resumed from a saved state is told nothing by a watch before a
// heartbeat of it was heard (where a stale identity is refused).
func TestAResumedGuestIsToldNothingBeforeItsHeartbeat(t *testing.T) {
	h, c := setup(t)
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), machineA, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Host = &macvirtv1alpha1.HostVMStatus{Resumes: 1}
	m.Status.Guest = &macvirtv1alpha1.GuestStatus{SSHHostKeys: []string{hostKey}}
	if err := c.Status().Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if code, _ := watch(t, h, tokenA, ""); code != http.StatusConflict {
		t.Fatalf("a watch of a resumed guest not heard since: %d, want 409", code)
	}
	if got := resumedUnheard(&macvirtv1alpha1.MacMachine{Status: macvirtv1alpha1.MacMachineStatus{
		Host: &macvirtv1alpha1.HostVMStatus{Resumes: 1}, Guest: &macvirtv1alpha1.GuestStatus{Resumes: 1}}}); got != "" {
		t.Fatalf("a guest heard since its resume: %q, want none", got)
	}
}
