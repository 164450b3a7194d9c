package guestagent

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// taskLinux is the test platform with tasks: it speaks v2, and so watches.
type taskLinux struct {
	*linux
	testHost
	tasks string
}

func (l taskLinux) TaskDir() string { return l.tasks }

// A claim's new key reaches the guest through the watch: the class asks
// for a heartbeat a minute, longer than the test waits.
func TestANewKeyReachesTheGuestThroughTheWatchNotTheNextHeartbeat(t *testing.T) {
	dir, c, h := operatorWithTimeout(t, time.Hour)
	home := t.TempDir()
	guest := taskLinux{linux: &linux{configDir: dir, home: home, hostname: "golden"}, testHost: testHost{dir: t.TempDir()},
		tasks: filepath.Join(t.TempDir(), "tasks")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, guest, t.Logf) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	keys := filepath.Join(home, "admin", ".ssh", "authorized_keys")
	waitForKey := func(key string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(keys); err == nil && strings.Contains(string(b), key) { //nolint:gosec // the test's own file.
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%q did not reach authorized_keys within 30s (the next heartbeat is a minute away)", key)
	}
	waitForKey("ssh-ed25519 AAAAkey dev@example")
	// The watch is held once the first answer is in.
	for deadline := time.Now().Add(30 * time.Second); h.Watching() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent holds no watch 30s after its first answer")
		}
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "build"}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Spec.SSHAuthorizedKeys = append(claim.Spec.SSHAuthorizedKeys, "ssh-ed25519 AAAAnew second@example")
	if err := c.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	h.Changed(types.NamespacedName{Namespace: "macvirt-pools", Name: "ci-0"})
	waitForKey("ssh-ed25519 AAAAnew second@example")
}

// fakeOperator answers heartbeats with revision r1 and watches as watch
// says, counting both.
type fakeOperator struct {
	heartbeats, watches atomic.Int32
	watch               func(n int32) (int, string)
}

func (f *fakeOperator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case guestprotocol.HeartbeatPathV2:
		f.heartbeats.Add(1)
		_ = json.NewEncoder(w).Encode(guestprotocol.DesiredStateV2{Revision: "r1",
			DesiredState: guestprotocol.DesiredState{SSHUser: "admin", HeartbeatIntervalSeconds: 3600}})
	case guestprotocol.WatchPath:
		code, rev := f.watch(f.watches.Add(1))
		if code != http.StatusOK {
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(guestprotocol.Error{Reason: guestprotocol.ReasonUnsupported, Message: "no"})
			return
		}
		_ = json.NewEncoder(w).Encode(guestprotocol.WatchAnswer{Revision: rev})
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeOperator) speaker(t *testing.T) (*Speaker, *Client) {
	t.Helper()
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	c := &Client{cfg: &Config{Endpoint: srv.URL, Token: "t", Namespace: "ns", Machine: "m"}, http: srv.Client()}
	return &Speaker{Tasks: newTasks(t, t.TempDir()), Logf: t.Logf}, c
}

func TestAWatchPushesOnlyAnotherRevisionAndWaitsForTheHeartbeat(t *testing.T) {
	f := &fakeOperator{watch: func(n int32) (int, string) {
		if n == 1 {
			return http.StatusOK, "r1" // the hold ended: nothing new.
		}
		return http.StatusOK, "r2"
	}}
	s, c := f.speaker(t)
	defer s.Stop()
	ctx := context.Background()
	if _, err := s.Heartbeat(ctx, c, Facts{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Pushed():
	case <-time.After(30 * time.Second):
		t.Fatal("the watch answered another revision and nothing was pushed")
	}
	if n := f.watches.Load(); n != 2 {
		t.Fatalf("%d watches before the push, want 2 (the first answered the heard revision)", n)
	}
	// Until the heartbeat it asked for is answered, the watcher asks
	// nothing more, however often the operator would say r2.
	time.Sleep(300 * time.Millisecond)
	if n := f.watches.Load(); n != 2 {
		t.Fatalf("%d watches while the pushed heartbeat is not answered, want 2", n)
	}
	if _, err := s.Heartbeat(ctx, c, Facts{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); f.watches.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no watch after the heartbeat was answered")
		}
	}
}

func TestAnOperatorWithoutTheWatchIsNotAskedInALoop(t *testing.T) {
	f := &fakeOperator{watch: func(int32) (int, string) { return http.StatusNotFound, "" }}
	s, c := f.speaker(t)
	defer s.Stop()
	if _, err := s.Heartbeat(context.Background(), c, Facts{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := f.watches.Load(); n != 1 {
		t.Fatalf("%d watches of an operator that answered 404, want 1 until V2Retry", n)
	}
	select {
	case <-s.Pushed():
		t.Fatal("a 404 pushed")
	default:
	}
}

// An endpoint that answers every watch at once is asked at most once per
// WatchSpacing, not in a loop.
func TestAnEndpointAnsweringAtOnceIsNotAskedInALoop(t *testing.T) {
	f := &fakeOperator{watch: func(int32) (int, string) { return http.StatusOK, "r1" }}
	s, c := f.speaker(t)
	defer s.Stop()
	if _, err := s.Heartbeat(context.Background(), c, Facts{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := int64(f.watches.Load()); n > int64(time.Second/WatchSpacing)+1 {
		t.Fatalf("%d watches in a second of an endpoint that answers at once, want at most %d", n, time.Second/WatchSpacing+1)
	}
}
