package hostagent

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// startDriver refuses the first starts with the VM limit, and records the
// shared directory of each start.
type startDriver struct {
	vz.Driver
	refuse int
	dirs   []string
}

func (d *startDriver) Start(_ context.Context, _ string, opts vz.StartOptions) error {
	d.dirs = append(d.dirs, opts.ConfigDir)
	if d.refuse > 0 {
		d.refuse--
		return vz.ErrVMLimit
	}
	return nil
}

func (d *startDriver) Slots(context.Context) (vz.Slots, error) {
	return vz.Slots{Max: 2, Running: 2}, nil
}

// configAgent is an agent whose endpoint answers every request with the
// files extra adds to a configuration whose token is "a", "b", ... by
// request, driving d; fetches counts the requests.
func configAgent(t *testing.T, d vz.Driver, extra map[string]string) (*Agent, *atomic.Int32) {
	t.Helper()
	var fetches atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != guestprotocol.HostConfigPath || r.Header.Get("Authorization") != "Bearer host-token" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		n := fetches.Add(1)
		files := map[string]string{guestprotocol.KeyEndpoint: "https://e", guestprotocol.KeyToken: string('a' + n),
			guestprotocol.KeyNamespace: "p", guestprotocol.KeyMachine: "m"}
		maps.Copy(files, extra)
		_ = json.NewEncoder(w).Encode(guestprotocol.HostConfig{Files: files})
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ep := &Endpoint{URL: srv.URL, CABundle: ca, Token: func() (string, error) { return "host-token", nil }}
	client, err := newEndpointClient(ep)
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{opts: Options{StateDir: t.TempDir(), Endpoint: ep}, driver: d, endpoint: client, unused: map[string]string{},
		stopWarnings: map[string]string{}, clock: clock.RealClock{}}, &fetches
}

// A configuration with a file the protocol does not name (a path, say) is
// refused whole, and no VM starts with it.
func TestAConfigurationWithAFileOutsideTheProtocolIsRefused(t *testing.T) {
	d := &startDriver{refuse: 2}
	a, fetches := configAgent(t, d, map[string]string{"../escape": "x"})
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m", UID: "u"}}

	if err := a.start(context.Background(), m, "vm", startMode{}); err == nil {
		t.Fatal("a configuration with a file outside the protocol's was written")
	}
	if fetches.Load() != 1 || len(d.dirs) != 0 {
		t.Fatalf("%d fetches, %d starts; want 1 and none", fetches.Load(), len(d.dirs))
	}
}

// A start the framework refuses is retried with the configuration already
// fetched: the machine is not drawn a new token (and Secret) per attempt.
// Once a start used it, the next start is a new boot with a new one.
func TestAStartRefusedIsRetriedWithoutANewToken(t *testing.T) {
	d := &startDriver{refuse: 2}
	a, fetches := configAgent(t, d, nil)
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m", UID: "u"}}
	for range 3 {
		_ = a.start(context.Background(), m, "vm", startMode{})
	}
	if fetches.Load() != 1 || len(d.dirs) != 3 {
		t.Fatalf("three starts (two refused): %d fetches, %d starts; want 1 and 3", fetches.Load(), len(d.dirs))
	}
	tok, err := os.ReadFile(filepath.Join(d.dirs[2], guestprotocol.KeyToken))
	if err != nil || string(tok) != "b" || filepath.Base(d.dirs[2]) != guestprotocol.ConfigShareName {
		t.Fatalf("the shared directory %s holds token %q (%v)", d.dirs[2], tok, err)
	}
	if err := a.start(context.Background(), m, "vm", startMode{}); err != nil {
		t.Fatal(err)
	}
	if fetches.Load() != 2 {
		t.Fatalf("a start after one that ran: %d fetches, want a second", fetches.Load())
	}
}

// stopDriver's own request to stop fails as lume shutdown does with a
// wrong guest password.
type stopDriver struct{ vz.Driver }

func (stopDriver) RequestStop(context.Context, string) error {
	return errors.New(`lume shutdown macvirt-x: exit status 1: {"message":"SSH authentication failed. Check username and password."}`)
}

// When the share asked the guest agent but the tool's own request failed,
// the stop is still asked (the VM is waited for), and the tool's words stay
// in status.host.error while it is: a guest agent that never answers
// leaves them as the only clue. A VM without a share gets the error.
func TestAToolsFailedStopRequestStaysVisibleWhileTheShareAsked(t *testing.T) {
	a, _ := configAgent(t, stopDriver{}, nil)
	if err := a.requestStop(context.Background(), "vm"); err == nil || !strings.Contains(err.Error(), "SSH authentication failed") {
		t.Fatalf("no share, the tool failed: requestStop said %v", err)
	}
	if w := a.stopWarning("vm"); w != "" {
		t.Fatalf("no share: a warning %q beside the error", w)
	}
	if err := os.MkdirAll(filepath.Join(a.opts.StateDir, configsDir, "vm", guestprotocol.ConfigShareName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := a.requestStop(context.Background(), "vm"); err != nil {
		t.Fatalf("the share asked: requestStop said %v", err)
	}
	w := a.stopWarning("vm")
	if !strings.Contains(w, "SSH authentication failed") {
		t.Fatalf("the tool's words were dropped: warning %q", w)
	}
	for _, c := range []struct{ problem, want string }{
		{"", w},
		{"StopFailed: past the grace period", "StopFailed: past the grace period; " + w},
	} {
		if got := waitingProblem(c.problem, w); got != c.want {
			t.Fatalf("waitingProblem(%q) = %q, want %q", c.problem, got, c.want)
		}
	}
	a.forgetStopWarning("vm")
	if a.stopWarning("vm") != "" || waitingProblem("", a.stopWarning("vm")) != "" {
		t.Fatal("a stopped VM kept its warning")
	}
}
