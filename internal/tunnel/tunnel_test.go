package tunnel

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/localnet"
	"github.com/macvirt/macvirt/internal/pki"
)

func boundClaim() (*macvirtv1alpha1.MacClaim, *macvirtv1alpha1.MacMachine) {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "build", UID: "claim-uid"}}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "pools", Name: "m1", UID: "machine-uid"}}
	c.Status.Phase = macvirtv1alpha1.ClaimReady
	c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "pools", Name: "m1", UID: "machine-uid"}
	c.Status.Connection = &macvirtv1alpha1.ClaimConnection{SSHPort: 22, Address: "10.244.1.2"}
	m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team", Name: "build", UID: "claim-uid"}
	m.Status.Addresses = []string{"10.244.1.2"}
	return c, m
}

// onHost places the machine on an Apple-silicon host, whose VM runs behind
// its NAT: no pod-network address.
func onHost(c *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
	(*m).Spec.HostName, (*m).Status.Addresses = "mac-a", nil
	(*m).Status.Host = &macvirtv1alpha1.HostVMStatus{State: macvirtv1alpha1.HostVMRunning, Address: "192.168.64.3"}
	c.Status.Connection.Address = ""
}

func TestTarget(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*macvirtv1alpha1.MacClaim, **macvirtv1alpha1.MacMachine)
		port int32
		want string // the address, or a part of the error (which has spaces)
	}{
		"SSH of a Ready claim": {nil, 22, "10.244.1.2:22"},
		"Screen Sharing, offered": {func(c *macvirtv1alpha1.MacClaim, _ **macvirtv1alpha1.MacMachine) {
			c.Status.Connection.VNCPort = 5900
		}, 5900, "10.244.1.2:5900"},
		"Screen Sharing, not offered": {nil, 5900, "port 5900 of macclaim team/build is not open: the tunnel reaches port 22 (SSH)"},
		"any other port":              {nil, 8080, "port 8080 of macclaim team/build is not open"},
		"an IPv6 address": {func(_ *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			(*m).Status.Addresses = []string{"fd00::5"}
		}, 22, "[fd00::5]:22"},
		"a claim with no machine yet": {func(c *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			c.Status.MachineRef, c.Status.Phase, *m = nil, macvirtv1alpha1.ClaimPending, nil
		}, 22, `macclaim team/build has no Mac yet (phase "Pending"); kubectl mac wait build`},
		"a machine bound to another claim of that name": {func(_ *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			(*m).Spec.ClaimRef.UID = "an-earlier-claim"
		}, 22, "is not bound to macmachine pools/m1"},
		"an unbound machine": {func(_ *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			(*m).Spec.ClaimRef = nil
		}, 22, "is not bound to macmachine pools/m1"},
		"no address yet": {func(_ *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			(*m).Status.Addresses, (*m).Status.Phase = nil, macvirtv1alpha1.MachineStarting
		}, 22, `macclaim team/build's Mac has no address yet (machine phase "Starting")`},
		"bound, not Ready: no connection": {func(c *macvirtv1alpha1.MacClaim, _ **macvirtv1alpha1.MacMachine) {
			c.Status.Connection, c.Status.Phase = nil, macvirtv1alpha1.ClaimBound
		}, 22, "macclaim team/build is not Ready yet: its status has no connection"},
		"an expired claim": {func(c *macvirtv1alpha1.MacClaim, _ **macvirtv1alpha1.MacMachine) {
			c.Status.Phase = macvirtv1alpha1.ClaimExpired
		}, 22, "macclaim team/build is Expired: it has no Mac any more"},
		"an Apple-silicon Mac: its host's agent": {onHost, 22, "route port 22 of macmachine pools/m1 on MacHost mac-a"},
		"an Apple-silicon Mac, Screen Sharing offered": {func(c *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			onHost(c, m)
			c.Status.Connection.VNCPort = 5900
		}, 5900, "route port 5900 of macmachine pools/m1 on MacHost mac-a"},
		"an Apple-silicon Mac, any other port": {onHost, 8080, "port 8080 of macclaim team/build is not open"},
		"an Apple-silicon Mac whose VM stopped": {func(c *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			onHost(c, m)
			(*m).Status.Host.State = macvirtv1alpha1.HostVMStopped
		}, 22, "macclaim team/build's Mac does not run on MacHost mac-a yet"},
		"an Apple-silicon Mac not made yet": {func(c *macvirtv1alpha1.MacClaim, m **macvirtv1alpha1.MacMachine) {
			onHost(c, m)
			(*m).Status.Host = nil
		}, 22, "does not run on MacHost mac-a yet"},
		"a lost claim": {func(c *macvirtv1alpha1.MacClaim, _ **macvirtv1alpha1.MacMachine) {
			c.Status.Phase = macvirtv1alpha1.ClaimLost
		}, 22, "macclaim team/build is Lost"},
	} {
		t.Run(name, func(t *testing.T) {
			c, m := boundClaim()
			if tc.mod != nil {
				tc.mod(c, &m)
			}
			route, err := Target(c, m, tc.port)
			got := route.String()
			if wantErr := !strings.HasPrefix(tc.want, "route ") && strings.Contains(tc.want, " "); wantErr != (err != nil) ||
				!wantErr && "route "+got != tc.want && got != tc.want || wantErr && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Target = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParsePath(t *testing.T) {
	if r, ok := parsePath(Path("team", "build", 22)); !ok || r != (request{namespace: "team", name: "build", port: 22}) {
		t.Errorf("parsePath(Path(...)) = %+v, %v", r, ok)
	}
	for _, p := range []string{
		"/apis/subresources.macvirt.io/v1alpha1/namespaces/team/macclaims/build/portforward",
		"/apis/subresources.macvirt.io/v1alpha1/namespaces/team/macclaims/build/portforward/0",
		"/apis/subresources.macvirt.io/v1alpha1/namespaces/team/macclaims/build/portforward/65536",
		"/apis/subresources.macvirt.io/v1alpha1/namespaces/team/macclaims/build/portforward/22/extra",
		"/apis/subresources.macvirt.io/v1alpha1/namespaces/team/macmachines/build/portforward/22",
		"/apis/subresources.macvirt.io/v1alpha1/namespaces//macclaims/build/portforward/22",
		"/apis/subresources.macvirt.io/v1/namespaces/team/macclaims/build/portforward/22",
	} {
		if r, ok := parsePath(p); ok {
			t.Errorf("parsePath(%q) = %+v, want no tunnel", p, r)
		}
	}
}

// rig is a tunnel server with a fake API behind it, the certificates of
// the API server's front proxy, and a Mac that echoes.
type rig struct {
	addr               string
	servingCA, proxyCA *pki.CA
	proxyCrt, proxyKey []byte
	reviews            []authorizationv1.SubjectAccessReviewSpec
	allowed            map[string]bool
	mac                string
	dialed             []string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{allowed: map[string]bool{"alice": true}}
	var err error
	if r.servingCA, err = pki.NewCA("serving", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r.proxyCA, err = pki.NewCA("front-proxy-ca", time.Hour); err != nil {
		t.Fatal(err)
	}
	if r.proxyCrt, r.proxyKey, err = r.proxyCA.Issue(x509.Certificate{Subject: pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	crt, key, err := r.servingCA.Issue(x509.Certificate{Subject: pkix.Name{CommonName: "tunnel"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The Mac: an echo server.
	mac, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mac.Close() })
	go func() {
		for {
			c, err := mac.Accept()
			if err != nil {
				return
			}
			go func() { defer func() { _ = c.Close() }(); _, _ = io.Copy(c, c) }()
		}
	}()
	r.mac = mac.Addr().String()

	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = macvirtv1alpha1.AddToScheme(s)
	claim, machine := boundClaim()
	claim.Status.Connection.VNCPort = 5900
	authConfig := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: authConfigNamespace, Name: authConfigName},
		Data: map[string]string{
			"requestheader-client-ca-file":       string(r.proxyCA.PEM),
			"requestheader-allowed-names":        `["front-proxy-client"]`,
			"requestheader-username-headers":     `["X-Remote-User"]`,
			"requestheader-group-headers":        `["X-Remote-Group"]`,
			"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(claim, machine, authConfig).WithStatusSubresource(claim, machine).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if sar, ok := obj.(*authorizationv1.SubjectAccessReview); ok {
				r.reviews = append(r.reviews, sar.Spec)
				ra := sar.Spec.ResourceAttributes
				sar.Status.Allowed = r.allowed[sar.Spec.User] && ra.Group == Group && ra.Resource == Resource &&
					ra.Subresource == Subresource && ra.Verb == "get" && ra.Namespace == "team"
				return nil
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	port, err := localnet.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := &Server{Addr: r.addr, CertDir: dir, Reader: c, Reviewer: c, Auth: &FrontProxy{Reader: c},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			r.dialed = append(r.dialed, address)
			var d net.Dialer
			return d.DialContext(ctx, network, r.mac) // every Mac is the echo server
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the tunnel server: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", r.addr)
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tunnel server did not listen: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

// config is the API server's front proxy calling for user (no client
// certificate when crt is nil), as rest.Config for Dial.
func (r *rig) config(user string, crt, key []byte) *rest.Config {
	return &rest.Config{Host: "https://" + r.addr,
		TLSClientConfig: rest.TLSClientConfig{CAData: r.servingCA.PEM, CertData: crt, KeyData: key},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				req.Header.Set("X-Remote-User", user)
				req.Header.Add("X-Remote-Group", "system:authenticated")
				return rt.RoundTrip(req)
			})
		}}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTheTunnelCarriesBytesToTheBoundMacForAnAuthorisedUser(t *testing.T) {
	r := newRig(t)
	conn, err := Dial(context.Background(), r.config("alice", r.proxyCrt, r.proxyKey), "team", "build", 5900)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	msg := strings.Repeat("hello, Mac ", 10000) // more than one message's worth
	go func() { _, _ = io.WriteString(conn, msg) }()
	got := make([]byte, len(msg))
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
	if len(r.dialed) != 1 || r.dialed[0] != "10.244.1.2:5900" {
		t.Errorf("dialed %q, want the machine's address and the port", r.dialed)
	}
	if len(r.reviews) != 1 || r.reviews[0].User != "alice" || r.reviews[0].Groups[0] != "system:authenticated" ||
		r.reviews[0].ResourceAttributes.Name != "build" {
		t.Errorf("reviews %+v, want alice's get of macclaims/portforward build", r.reviews)
	}
}

func TestTheTunnelRefuses(t *testing.T) {
	r := newRig(t)
	other, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forgedCrt, forgedKey, err := other.Issue(x509.Certificate{Subject: pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	wrongCrt, wrongKey, err := r.proxyCA.Issue(x509.Certificate{Subject: pkix.Name{CommonName: "someone-else"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		cfg        *rest.Config
		name       string
		port       int32
		is         func(error) bool
		want       string
		noDialNoSA bool
	}{
		"a pod calling the Service directly, naming a user": {r.config("alice", nil, nil), "build", 22, apierrors.IsUnauthorized,
			"no client certificate: only the API server's front proxy may call the tunnel", true},
		"a client certificate the front-proxy CA did not sign": {r.config("alice", forgedCrt, forgedKey), "build", 22, func(error) bool { return true },
			"", true},
		"the front-proxy CA's certificate for another name": {r.config("alice", wrongCrt, wrongKey), "build", 22, apierrors.IsUnauthorized,
			`client certificate "someone-else" is not one the API server's front proxy uses`, true},
		"a user without the right": {r.config("mallory", r.proxyCrt, r.proxyKey), "build", 22, apierrors.IsForbidden,
			`user "mallory" cannot get macclaims/portforward.subresources.macvirt.io in namespace "team"`, true},
		"a claim that does not exist": {r.config("alice", r.proxyCrt, r.proxyKey), "nosuch", 22, apierrors.IsNotFound, `macclaims.macvirt.io "nosuch" not found`, true},
		"a port the class does not open": {r.config("alice", r.proxyCrt, r.proxyKey), "build", 8080, apierrors.IsServiceUnavailable,
			"port 8080 of macclaim team/build is not open: the tunnel reaches port 22 and 5900", true},
	} {
		t.Run(name, func(t *testing.T) {
			r.dialed = nil
			conn, err := Dial(context.Background(), tc.cfg, "team", tc.name, tc.port)
			if err == nil {
				_ = conn.Close()
				t.Fatal("the tunnel opened")
			}
			if !tc.is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v (%T); want %q", err, err, tc.want)
			}
			if tc.noDialNoSA && len(r.dialed) > 0 {
				t.Errorf("dialed %q", r.dialed)
			}
		})
	}
}

// The front proxy's trust comes from the API server's ConfigMap; a
// ConfigMap without a request-header CA refuses every tunnel, saying why.
func TestParseTrust(t *testing.T) {
	if _, err := parseTrust(map[string]string{}); err == nil || !strings.Contains(err.Error(), "--requestheader-client-ca-file") {
		t.Errorf("no CA: %v", err)
	}
	if _, err := parseTrust(map[string]string{"requestheader-client-ca-file": "not PEM"}); err == nil {
		t.Error("a CA file without PEM was taken")
	}
	ca, _ := pki.NewCA("x", time.Hour)
	_, err := parseTrust(map[string]string{"requestheader-client-ca-file": string(ca.PEM), "requestheader-allowed-names": "[broken"})
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		t.Errorf("broken JSON: %v", err)
	}
	if _, err := parseTrust(map[string]string{"requestheader-client-ca-file": string(ca.PEM)}); err == nil || !strings.Contains(err.Error(), "username-headers") {
		t.Errorf("no user headers: %v", err)
	}
}

// An idle tunnel pings, and the operator's side answers each, so that no
// load balancer between a laptop and the API server drops a quiet shell;
// the pings stop with the connection.
func TestAnIdleTunnelKeepsItselfAlive(t *testing.T) {
	defer func(d time.Duration) { pingInterval = d }(pingInterval)
	pingInterval = 20 * time.Millisecond
	r := newRig(t)
	conn, err := Dial(context.Background(), r.config("alice", r.proxyCrt, r.proxyKey), "team", "build", 22)
	if err != nil {
		t.Fatal(err)
	}
	pongs := make(chan struct{}, 100)
	ws := conn.(*wsConn)
	ws.ws.SetPongHandler(func(string) error {
		pongs <- struct{}{}
		return nil
	})
	go func() { _, _ = conn.Read(make([]byte, 1)) }() // a quiet shell: reads, nothing comes
	for i := range 3 {
		select {
		case <-pongs:
		case <-time.After(10 * time.Second):
			t.Fatalf("pong %d did not come", i+1)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ws.done:
	default:
		t.Error("closing the tunnel left its pings running")
	}
}
