package guestagent

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

const token = "a-machine-token-0123456789abcdef"

// operator serves the real heartbeat handler over TLS for one bound machine
// and returns the config disk an agent of that machine would see.
func operator(t *testing.T) (configDir string, c client.Client) {
	t.Helper()
	dir, c, _ := operatorWithTimeout(t, 20*time.Second)
	return dir, c
}

// operatorWithTimeout is operator whose class has the heartbeatTimeout,
// and the handler.
func operatorWithTimeout(t *testing.T, timeout time.Duration) (configDir string, c client.Client, h *guestendpoint.Handler) {
	t.Helper()
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "ci-0", Namespace: "macvirt-pools", UID: "m1",
			Labels:      map[string]string{macvirtv1alpha1.LabelPool: "ci"},
			Annotations: map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: guestprotocol.HashToken(token)}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma",
			ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: "team-a", Name: "build", UID: "u1"}},
	}
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team-a", UID: "u1"},
		Spec:   macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAkey dev@example"}},
		Status: macvirtv1alpha1.MacClaimStatus{MachineRef: &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "ci-0", UID: "m1"}}}
	// The shortest heartbeatTimeout, so the agent is asked to heartbeat
	// every 5 s (the least it is ever asked).
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	class.Spec.Lifecycle.HeartbeatTimeout = &metav1.Duration{Duration: timeout}
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Spec: macvirtv1alpha1.MacPoolSpec{ClassName: "sonoma", Namespace: "macvirt-pools"}}
	c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(m, claim, class, pool).WithStatusSubresource(&macvirtv1alpha1.MacMachine{}).Build()
	h = &guestendpoint.Handler{Client: c}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for key, value := range map[string]string{guestprotocol.KeyEndpoint: srv.URL, guestprotocol.KeyCABundle: string(ca), guestprotocol.KeyToken: token + "\n",
		guestprotocol.KeyNamespace: "macvirt-pools", guestprotocol.KeyMachine: "ci-0"} {
		if err := os.WriteFile(filepath.Join(dir, key), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, c, h
}

// linux is a Platform for tests: a fixed config dir, a home directory, and
// a hostname that starts as the golden image's.
type linux struct {
	configDir, home string

	mu        sync.Mutex
	hostname  string
	renames   []string
	renameErr error // SetHostname fails with it when set
}

func (l *linux) ConfigDir() (string, error) { return l.configDir, nil }
func (l *linux) Facts() (Facts, error) {
	return Facts{OSVersion: "14.5", OSBuild: "23F79", Hostname: l.currentHostname(), BootTime: time.Now().Add(-time.Minute),
		IPAddresses: []string{"10.0.2.2"}}, nil
}
func (l *linux) Owner(string) (int, int, error) { return os.Getuid(), os.Getgid(), nil }
func (l *linux) AuthorizedKeysPath(user string) (string, error) {
	if err := os.MkdirAll(filepath.Join(l.home, user), 0o700); err != nil {
		return "", err
	}
	return filepath.Join(l.home, user, ".ssh", "authorized_keys"), nil
}
func (l *linux) SetHostname(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renameErr != nil {
		return l.renameErr
	}
	l.hostname = name
	l.renames = append(l.renames, name)
	return nil
}
func (l *linux) currentHostname() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hostname
}

func TestRunHeartbeatsAndDeliversTheClaimsKeys(t *testing.T) {
	dir, c := operator(t)
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	guest := &linux{configDir: dir, home: home, hostname: "golden-sonoma"}
	go func() { done <- Run(ctx, guest, t.Logf) }()
	keys := filepath.Join(home, "admin", ".ssh", "authorized_keys")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(keys) //nolint:gosec // the test's own file.
		if err == nil && strings.Contains(string(b), "ssh-ed25519 AAAAkey dev@example\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys not delivered within 30s (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "macvirt-pools", Name: "ci-0"}, m); err != nil {
		t.Fatal(err)
	}
	if g := m.Status.Guest; g == nil || g.LastHeartbeat == nil || g.AgentVersion != Version || g.OSBuild != "23F79" {
		t.Errorf("status.guest after a heartbeat: %+v", g)
	}
	if info, err := os.Stat(keys); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("authorized_keys mode %v (%v), want 0600", info.Mode(), err)
	}
	if guest.currentHostname() != "ci-0" {
		t.Errorf("hostname %q after the operator's answer, want the machine's name ci-0", guest.currentHostname())
	}
}

// A guest that cannot rename itself still gets the claim's keys, and keeps
// heartbeating at the operator's interval instead of backing off (which
// would make a healthy guest look silent).
func TestAFailedRenameNeitherBlocksKeysNorBacksOffHeartbeats(t *testing.T) {
	dir, _ := operator(t)
	home := t.TempDir()
	guest := &linux{configDir: dir, home: home, hostname: "golden-sonoma", renameErr: errors.New("scutil: permission denied")}
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, guest, logf) }()
	keys := filepath.Join(home, "admin", ".ssh", "authorized_keys")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(keys) //nolint:gosec // the test's own file.
		if err == nil && strings.Contains(string(b), "ssh-ed25519 AAAAkey dev@example\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys not delivered within 30s (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) == 0 || !strings.Contains(logs[0], "applying the desired state failed") || !strings.Contains(logs[0], "scutil: permission denied") {
		t.Errorf("logs %q, want the rename failure reported", logs)
	}
	for _, l := range logs {
		if strings.Contains(l, "heartbeat failed") {
			t.Errorf("a rename failure backed off the heartbeats: %q", l)
		}
	}
}

// A guest that cannot write the claim's keys (here a ~/.ssh that is a
// symlink, which the agent refuses to follow) tells the operator, which
// records it on the machine, and says so again once it can.
func TestAGuestThatCannotApplyTheKeysTellsTheOperator(t *testing.T) {
	dir, c := operator(t)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "admin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(home, "admin", ".ssh")); err != nil {
		t.Fatal(err)
	}
	guest := &linux{configDir: dir, home: home, hostname: "golden-sonoma"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, guest, t.Logf) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	applyError := func() string {
		m := &macvirtv1alpha1.MacMachine{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "macvirt-pools", Name: "ci-0"}, m); err != nil || m.Status.Guest == nil {
			return ""
		}
		return m.Status.Guest.ApplyError
	}
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok(applyError()) {
			if time.Now().After(deadline) {
				t.Fatalf("status.guest.applyError %q: %s within 30s", applyError(), what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("want the symlinked .ssh reported", func(s string) bool { return strings.Contains(s, ".ssh") })
	t.Logf("the machine says: %s", applyError())
	if err := os.Remove(filepath.Join(home, "admin", ".ssh")); err != nil {
		t.Fatal(err)
	}
	waitFor("want it cleared once the keys are written", func(s string) bool { return s == "" })
}

func TestApplySetsTheHostnameOnlyWhenItDiffersAndIsADNSName(t *testing.T) {
	for _, tc := range []struct {
		name, reported, desired string
		wantRenames             []string
		wantErr                 string
	}{
		{name: "golden image name", reported: "golden-sonoma", desired: "ci-0", wantRenames: []string{"ci-0"}},
		{name: "already named", reported: "ci-0", desired: "ci-0"},
		{name: "operator sends none", reported: "golden-sonoma", desired: ""},
		{name: "a subdomain", reported: "x", desired: "ci-0.pools", wantRenames: []string{"ci-0.pools"}},
		{name: "not a DNS name", reported: "x", desired: "ci 0; reboot", wantErr: `refusing the hostname "ci 0; reboot"`},
		{name: "upper case", reported: "x", desired: "CI-0", wantErr: "refusing the hostname"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &linux{home: t.TempDir(), hostname: tc.reported}
			err := apply(p, Facts{Hostname: tc.reported}, &guestprotocol.DesiredState{Hostname: tc.desired, SSHUser: "admin"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("apply: %v, want an error containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.renames, tc.wantRenames) {
				t.Errorf("renames %q, want %q", p.renames, tc.wantRenames)
			}
		})
	}
}

func TestAWrongTokenIsAnUnretryableRefusal(t *testing.T) {
	dir, _ := operator(t)
	cfg, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != token {
		t.Fatalf("token %q: the trailing newline was not trimmed", cfg.Token)
	}
	cfg.Token = "stolen"
	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Heartbeat(context.Background(), Facts{})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 401 || se.Body.Reason != guestprotocol.ReasonUnauthorized || se.Retryable() {
		t.Errorf("error %v, want a 401 Unauthorized that is not retried", err)
	}
}

func TestReadConfigRefusesAnIncompleteDisk(t *testing.T) {
	dir, _ := operator(t)
	for key, content := range map[string]string{guestprotocol.KeyToken: "", guestprotocol.KeyEndpoint: "http://plain.example:80"} {
		t.Run(key, func(t *testing.T) {
			d := t.TempDir()
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name())) //nolint:gosec // the test's own files.
				if e.Name() == key {
					b = []byte(content)
				}
				if err := os.WriteFile(filepath.Join(d, e.Name()), b, 0o600); err != nil { //nolint:gosec // names from the test's own directory.
					t.Fatal(err)
				}
			}
			if _, err := ReadConfig(d); err == nil {
				t.Error("accepted")
			}
		})
	}
	if _, err := ReadConfig(t.TempDir()); err == nil {
		t.Error("an empty directory was accepted")
	}
}

func TestWriteAuthorizedKeysReplacesTheFileWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".ssh", "authorized_keys")
	uid, gid := os.Getuid(), os.Getgid()
	if err := WriteAuthorizedKeys(path, []string{"ssh-ed25519 AAAA1 a", " ssh-ed25519 AAAA2 b \n"}, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := WriteAuthorizedKeys(path, []string{"ssh-ed25519 AAAA3 c"}, uid, gid); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		if info, err := os.Lstat(p); err != nil || info.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, info.Mode(), err, want)
		}
	}
	b, err := os.ReadFile(path) //nolint:gosec // the test's own file.
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.HasSuffix(got, "\nssh-ed25519 AAAA3 c\n") || strings.Contains(got, "AAAA1") {
		t.Errorf("authorized_keys = %q", got)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// The guest's user owns its home and may point .ssh, or authorized_keys,
// at a place only root may write (the agent's own files): the agent, which
// runs as root, must write through neither.
func TestWriteAuthorizedKeysFollowsNoSymlink(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	rootOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(rootOnly, "agent.conf"), []byte("root's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unchanged := func() {
		t.Helper()
		entries, _ := os.ReadDir(rootOnly)
		b, _ := os.ReadFile(filepath.Join(rootOnly, "agent.conf")) //nolint:gosec // the test's own file.
		if len(entries) != 1 || string(b) != "root's own\n" {
			t.Errorf("the symlink's target was written: %v, %q", entries, b)
		}
	}

	home := t.TempDir()
	if err := os.Symlink(rootOnly, filepath.Join(home, ".ssh")); err != nil {
		t.Fatal(err)
	}
	err := WriteAuthorizedKeys(filepath.Join(home, ".ssh", "authorized_keys"), []string{"ssh-ed25519 AAAA1 a"}, uid, gid)
	if err == nil || !strings.Contains(err.Error(), "not a real directory") {
		t.Errorf("a symlinked .ssh: err = %v, want a refusal", err)
	}
	unchanged()

	home = t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(home, ".ssh", "authorized_keys")
	if err := os.Symlink(filepath.Join(rootOnly, "agent.conf"), keys); err != nil {
		t.Fatal(err)
	}
	if err := WriteAuthorizedKeys(keys, []string{"ssh-ed25519 AAAA1 a"}, uid, gid); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Lstat(keys); err != nil || !info.Mode().IsRegular() {
		t.Errorf("authorized_keys is %v (%v), want a regular file in place of the symlink", info.Mode(), err)
	}
	unchanged()

	home = t.TempDir()
	if err := os.Symlink(rootOnly, filepath.Join(home, "user")); err != nil {
		t.Fatal(err)
	}
	if err := WriteAuthorizedKeys(filepath.Join(home, "user", ".ssh", "authorized_keys"), nil, uid, gid); err == nil {
		t.Error("a symlinked home was followed")
	}
	unchanged()
}

func TestBackoffGrowsIsCappedAndJittered(t *testing.T) {
	for n, want := range map[int]time.Duration{0: time.Second, 3: 8 * time.Second, 20: time.Minute} {
		for range 50 {
			if d := Backoff(n, time.Second, time.Minute); d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", n, d, want/2, want)
			}
		}
	}
}

// A guest retrying through an operator outage of any length never waits
// longer than the interval the operator last gave (a quarter of
// heartbeatTimeout), so it is heard again well before it could look stale.
func TestRetriesNeverWaitLongerThanTheHeartbeatInterval(t *testing.T) {
	for _, interval := range []time.Duration{5 * time.Second, guestprotocol.DefaultHeartbeatInterval, time.Minute} {
		longest := time.Duration(0)
		for failures := range 40 {
			for range 20 {
				longest = max(longest, RetryWait(failures, interval))
			}
		}
		if longest > interval || longest < interval/2 {
			t.Errorf("interval %s: longest retry wait %s, want within [%s, %s]", interval, longest, interval/2, interval)
		}
	}
	if d := RetryWait(0, 0); d > time.Second {
		t.Errorf("RetryWait(0, 0) = %s, want at most 1s", d)
	}
}

// TestServerNameFromTheConfigDisk: with server-name on the disk, the
// endpoint's certificate is checked against that name, not the endpoint's
// host (the test server's certificate names example.com and 127.0.0.1).
func TestServerNameFromTheConfigDisk(t *testing.T) {
	dir, _ := operator(t)
	for name, wantErr := range map[string]string{"example.com": "", "macvirt-agent.elsewhere.svc": "certificate"} {
		if err := os.WriteFile(filepath.Join(dir, guestprotocol.KeyServerName), []byte(name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := ReadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ServerName != name {
			t.Fatalf("server name %q, want %q", cfg.ServerName, name)
		}
		cl, err := NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Heartbeat(context.Background(), Facts{Hostname: "ci-0"})
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("server name %s: %v", name, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("server name %s: err %v, want a certificate error", name, err)
		}
	}
}
