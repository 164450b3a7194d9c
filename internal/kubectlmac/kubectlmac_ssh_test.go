package kubectlmac

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// testMac is an SSH server standing in for a claim's Mac: it has a host
// key, lets in one user with one key, and answers an exec with
// "USER ran COMMAND", or for "cat" with its input.
type testMac struct {
	hostKey ssh.Signer
	port    int
}

func startTestMac(t *testing.T, user string, authorized ssh.PublicKey) *testMac {
	t.Helper()
	m := &testMac{hostKey: newKey(t)}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(md ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if md.User() == user && bytes.Equal(k.Marshal(), authorized.Marshal()) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s with key %s is not let in", md.User(), ssh.FingerprintSHA256(k))
	}}
	cfg.AddHostKey(m.hostKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	m.port = l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go serveTestSSH(nc, cfg)
		}
	}()
	return m
}

func serveTestSSH(nc net.Conn, cfg *ssh.ServerConfig) {
	defer func() { _ = nc.Close() }()
	sc, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		if nch.ChannelType() != "session" {
			_ = nch.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, chReqs, err := nch.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = ch.Close() }()
			for req := range chReqs {
				if req.Type != "exec" {
					_ = req.Reply(false, nil)
					continue
				}
				var p struct{ Command string }
				_ = ssh.Unmarshal(req.Payload, &p)
				_ = req.Reply(true, nil)
				if p.Command == "cat" {
					// Its input back, to the end.
					_, _ = io.Copy(ch, ch)
				} else {
					_, _ = fmt.Fprintf(ch, "%s ran %s\n", sc.User(), p.Command)
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
				return
			}
		}()
	}
}

// identityFile writes s's private key where -i can read it.
func identityFile(t *testing.T) (string, ssh.PublicKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(f, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return f, s.PublicKey()
}

// claimsOnly is a fake cluster of claims whose scheme knows no Secrets, and
// that fails the test on a read of anything but a MacClaim: ssh must get by
// with the claim alone.
func claimsOnly(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*macvirtv1alpha1.MacClaim); !ok {
				t.Errorf("ssh read a %T %s", obj, key)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}

func authorizedLine(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// runSSH runs kubectl mac ssh ARGS as Main would, against env.
func runSSH(t *testing.T, env *Env, args ...string) (int, error) {
	t.Helper()
	t.Setenv("SSH_AUTH_SOCK", "")
	c, rest := parseCommand(t, "ssh", args...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.run(ctx, env, rest)
}

// readyClaim is claim team/build whose Mac is mac, at 127.0.0.1.
func readyClaim(mac *testMac, user, host string) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid"}}
	c.Status.Phase = macvirtv1alpha1.ClaimReady
	c.Status.Connection = &macvirtv1alpha1.ClaimConnection{Host: host, Address: "127.0.0.1", SSHPort: int32(mac.port), User: user, //nolint:gosec // a TCP port.
		HostKeys: []string{authorizedLine(mac.hostKey.PublicKey()) + " root@build"}}
	return c
}

func TestSSHLogsInAsTheStatusUserCheckingTheStatusHostKeys(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "runner", pub)
	var out, errs bytes.Buffer
	env := &Env{Client: claimsOnly(t, readyClaim(mac, "runner", "")), Namespace: "team", Home: t.TempDir(), Streams: Streams{Out: &out, Err: &errs}}
	if code, err := runSSH(t, env, "build", "-i", key, "--", "uname", "-a"); code != 0 || err != nil {
		t.Fatalf("ssh: exit %d, %v; stderr %q", code, err, errs.String())
	}
	if got := out.String(); got != "runner ran uname -a\n" {
		t.Errorf("output %q, want the command run as status.connection.user", got)
	}
	if errs.Len() != 0 {
		t.Errorf("stderr %q, want nothing", errs.String())
	}
}

func TestSSHLogsInAsAdminForAClaimWithoutAUser(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "admin", pub)
	var out, errs bytes.Buffer
	env := &Env{Client: claimsOnly(t, readyClaim(mac, "", "")), Namespace: "team", Home: t.TempDir(), Streams: Streams{Out: &out, Err: &errs}}
	if code, err := runSSH(t, env, "build", "-i", key, "--", "true"); code != 0 || err != nil {
		t.Fatalf("ssh: exit %d, %v; stderr %q", code, err, errs.String())
	}
	if got := out.String(); got != "admin ran true\n" {
		t.Errorf("output %q, want the command run as admin", got)
	}
}

func TestSSHRefusesAHostKeyTheStatusDoesNotList(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "admin", pub)
	claim := readyClaim(mac, "admin", "")
	claim.Status.Connection.HostKeys = []string{authorizedLine(newKey(t).PublicKey())}
	var out, errs bytes.Buffer
	env := &Env{Client: claimsOnly(t, claim), Namespace: "team", Home: t.TempDir(), Streams: Streams{Out: &out, Err: &errs}}
	code, err := runSSH(t, env, "build", "-i", key, "--", "true")
	if code != 255 || err == nil || !strings.Contains(err.Error(), "host key verification failed") {
		t.Fatalf("ssh to an impostor: exit %d, %v", code, err)
	}
	if out.Len() != 0 {
		t.Errorf("a command ran on the impostor: %q", out.String())
	}
}

func TestSSHConnectsToTheAddressWhileTheNameDoesNotResolve(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "admin", pub)
	var dialed []string
	var out, errs bytes.Buffer
	env := &Env{Client: claimsOnly(t, readyClaim(mac, "admin", "build.macs.team.svc")), Namespace: "team", Home: t.TempDir(),
		Streams: Streams{Out: &out, Err: &errs},
		dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			dialed = append(dialed, address)
			if host, _, _ := net.SplitHostPort(address); host == "build.macs.team.svc" {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		}}
	if code, err := runSSH(t, env, "build", "-i", key, "--", "true"); code != 0 || err != nil {
		t.Fatalf("ssh: exit %d, %v; stderr %q", code, err, errs.String())
	}
	port := strconv.Itoa(mac.port)
	if want := []string{"build.macs.team.svc:" + port, "127.0.0.1:" + port}; strings.Join(dialed, " ") != strings.Join(want, " ") {
		t.Errorf("dialed %q, want %q", dialed, want)
	}
	want := "kubectl mac: build.macs.team.svc does not resolve (yet); connecting to macclaim team/build's address 127.0.0.1:" + port + " instead\n"
	if errs.String() != want {
		t.Errorf("stderr %q, want the one-line note %q", errs.String(), want)
	}
	if out.String() != "admin ran true\n" {
		t.Errorf("output %q", out.String())
	}
}

func TestSSHWithoutAConnectionOrHostKeysSaysToWait(t *testing.T) {
	pending := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team"}}
	pending.Status.Phase = macvirtv1alpha1.ClaimPending
	env := &Env{Client: claimsOnly(t, pending), Namespace: "team", Streams: Streams{Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}}
	if _, err := connection(context.Background(), env, "build"); err == nil || !strings.Contains(err.Error(), "has no connection yet (phase Pending): kubectl mac wait build") {
		t.Errorf("no connection: %v", err)
	}
	keyless := pending.DeepCopy()
	keyless.Status.Connection = &macvirtv1alpha1.ClaimConnection{Address: "10.244.1.2", SSHPort: 22, User: "admin"}
	env.Client = claimsOnly(t, keyless)
	if _, err := connection(context.Background(), env, "build"); err == nil || !strings.Contains(err.Error(), "has not reported its host keys yet, so it cannot be checked: kubectl mac wait build") {
		t.Errorf("no host keys: %v", err)
	}
	keyless.Status.Connection.HostKeys = []string{"ssh-ed25519 not-base64"}
	env.Client = claimsOnly(t, keyless)
	if _, err := connection(context.Background(), env, "build"); err == nil || !strings.Contains(err.Error(), "status.connection.hostKeys") {
		t.Errorf("a malformed host key: %v", err)
	}
}

func TestAddressFallbackOnlyForAnUnresolvedName(t *testing.T) {
	claim := func(conn *macvirtv1alpha1.ClaimConnection) *macvirtv1alpha1.MacClaim {
		c := &macvirtv1alpha1.MacClaim{}
		c.Name, c.Namespace, c.Status.Connection = "build", "team", conn
		return c
	}
	named := &macvirtv1alpha1.ClaimConnection{Host: "build.macs.team.svc", Address: "10.244.1.2", SSHPort: 22}
	nxdomain := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "build.macs.team.svc", IsNotFound: true}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for name, tc := range map[string]struct {
		claim  *macvirtv1alpha1.MacClaim
		target string
		err    error
		want   string
	}{
		"the name does not resolve":      {claim(named), "build.macs.team.svc:22", nxdomain, "10.244.1.2:22"},
		"a DNS timeout":                  {claim(named), "build.macs.team.svc:22", &net.DNSError{Err: "i/o timeout", IsTimeout: true}, "10.244.1.2:22"},
		"an IPv6 address, another port":  {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.macs.team.svc", Address: "fd00::5"}), "build.macs.team.svc:2222", nxdomain, "[fd00::5]:2222"},
		"connected":                      {claim(named), "build.macs.team.svc:22", nil, ""},
		"refused, not a DNS error":       {claim(named), "build.macs.team.svc:22", refused, ""},
		"the external address":           {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.macs.team.svc", Address: "10.244.1.2", External: &macvirtv1alpha1.ExternalAccess{Address: "lb.example.com", SSHPort: 22}}), "lb.example.com:22", nxdomain, ""},
		"no address to fall back to":     {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.macs.team.svc", SSHPort: 22}), "build.macs.team.svc:22", nxdomain, ""},
		"the target was the address":     {claim(&macvirtv1alpha1.ClaimConnection{Address: "10.244.1.2", SSHPort: 22}), "10.244.1.2:22", nxdomain, ""},
		"the host is the address itself": {claim(&macvirtv1alpha1.ClaimConnection{Host: "10.244.1.2", Address: "10.244.1.2"}), "10.244.1.2:22", nxdomain, ""},
	} {
		if got := addressFallback(tc.claim, tc.target, tc.err); got != tc.want {
			t.Errorf("%s: addressFallback = %q, want %q", name, got, tc.want)
		}
	}
}

// A CI script pipes into kubectl mac ssh, and the remote command ends
// without reading its input: `yes | kubectl mac ssh build -- true`, or a
// line echoed into a command that ignores it. Each run must end with the
// command's own status, never 255 for an input write the Mac refused.
func TestSSHWithPipedStdinExitsWithTheRemoteStatusEveryTime(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "runner", pub)
	cl := claimsOnly(t, readyClaim(mac, "runner", ""))
	home := t.TempDir()
	var failed []string
	for i := range 100 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { _ = w.Close() }()
			if i%2 == 1 {
				_, _ = io.WriteString(w, "one line\n")
				return
			}
			// yes: until the reading end is closed.
			chunk := bytes.Repeat([]byte("y\n"), 2048)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}()
		var out, errs bytes.Buffer
		env := &Env{Client: cl, Namespace: "team", Home: home, Streams: Streams{In: r, Out: &out, Err: &errs}}
		code, err := runSSH(t, env, "build", "-i", key, "--", "true")
		_ = r.Close()
		if code != 0 || err != nil || out.String() != "runner ran true\n" {
			failed = append(failed, fmt.Sprintf("run %d: exit %d, %v, output %q", i+1, code, err, out.String()))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of 100 runs with piped stdin failed; the first: %s", len(failed), failed[0])
	}
}

// A command that reads its input gets all of it, then its end.
func TestSSHGivesARemoteCommandAllOfItsPipedInput(t *testing.T) {
	key, pub := identityFile(t)
	mac := startTestMac(t, "runner", pub)
	in := make([]byte, 1<<20)
	if _, err := rand.Read(in); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = w.Write(in)
		_ = w.Close()
	}()
	defer func() { _ = r.Close() }()
	var out, errs bytes.Buffer
	env := &Env{Client: claimsOnly(t, readyClaim(mac, "runner", "")), Namespace: "team", Home: t.TempDir(), Streams: Streams{In: r, Out: &out, Err: &errs}}
	if code, err := runSSH(t, env, "build", "-i", key, "--", "cat"); code != 0 || err != nil {
		t.Fatalf("ssh: exit %d, %v; stderr %q", code, err, errs.String())
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("cat returned %d bytes, want the %d piped in, unchanged", out.Len(), len(in))
	}
}
