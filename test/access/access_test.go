// Package access_test runs kubectl mac as a tenant against the whole
// system: a real API server, the operator, and the simulated KubeVirt with
// its guests' sshd and its kube-proxy stand-in. The tenant authenticates
// with a client certificate of its own and holds only the shipped roles.
package access_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/kubectlmac"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

func TestATenantClaimsAndReachesTheirMacWithKubectlMac(t *testing.T) {
	cluster.NeedsAPIServer(t)
	world := harness.ForTest(t, harness.Options{Log: io.Discard, System: &harness.SystemOptions{Speed: 4, Network: true},
		Samples: &harness.SampleOptions{Machines: 1}, Tenant: true})
	ctx, scheme, admin, sys, env := world.Ctx, world.Scheme, world.Admin, world.System, world.Cluster.Environment
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "tenant.kubeconfig")
	if err := harness.WriteTenantKubeconfig(env, harness.TenantUser, harness.TenantNamespace, kubeconfig); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	writeKey(t, filepath.Join(home, ".ssh", "id_ed25519"))
	other := filepath.Join(dir, "other")
	writeKey(t, other)
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	t.Setenv("KUBECONFIG", kubeconfig)

	stdin := ""
	mac := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := kubectlmac.Main(ctx, args, kubectlmac.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut})
		t.Logf("$ kubectl mac %s\n%s%s(exit %d)", strings.Join(args, " "), out.String(), errOut.String(), code)
		return code, out.String(), errOut.String()
	}

	tenantCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := client.New(tenantCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the kubeconfig is the tenant's, not an admin's", func(t *testing.T) {
		c := tenant
		err := c.List(ctx, &macvirtv1alpha1.MacMachineList{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing MacMachines as the tenant: %v, want Forbidden", err)
		}
		// Every kubectl mac command below runs without reading a Secret.
		err = c.List(ctx, &corev1.SecretList{}, client.InNamespace(harness.TenantNamespace))
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing Secrets of %s as the tenant: %v, want Forbidden", harness.TenantNamespace, err)
		}
	})

	t.Run("the tenant reads its claim's events, as kubectl describe shows them", func(t *testing.T) {
		c := tenant
		// Written past kubectl mac's own check, the claim stalls, and
		// says why in a Warning event.
		stuck := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: harness.TenantNamespace},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "nosuch"}}
		if err := c.Create(ctx, stuck); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Delete(ctx, stuck) }()
		var seen []string
		deadline := time.Now().Add(time.Minute)
		for len(seen) == 0 && time.Now().Before(deadline) {
			evs := &corev1.EventList{}
			if err := c.List(ctx, evs, client.InNamespace(harness.TenantNamespace),
				client.MatchingFields{"involvedObject.kind": "MacClaim", "involvedObject.name": "stuck"}); err != nil {
				t.Fatalf("listing the claim's events as the tenant: %v", err)
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, `"nosuch"`) {
					seen = append(seen, e.Reason+": "+e.Message)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if len(seen) == 0 {
			t.Fatal("no Warning event of claim stuck naming its missing class within a minute")
		}
		t.Logf("the tenant sees: %s", seen[0])
		// Its own namespace's events only: not the pools' namespace's.
		if err := c.List(ctx, &corev1.EventList{}, client.InNamespace("macvirt-pools")); !apierrors.IsForbidden(err) {
			t.Errorf("listing the events of macvirt-pools as the tenant: %v, want Forbidden", err)
		}
	})

	t.Run("a claim that cannot be served is refused before anything is created", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"claim", "typo", "--class", "nosuch", "--wait"}, 1, `MacClass "nosuch" does not exist (kubectl get macclasses lists them); no claim was created`},
			{[]string{"claim", "typo", "--class", harness.TenantClass, "--access", "Nodeport"}, 2, `--access "Nodeport": give ClusterIP, NodePort or LoadBalancer`},
		} {
			code, _, errOut := mac(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("kubectl mac %s: exit %d, %q; want exit %d saying %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.want)
			}
		}
		err := admin.Get(ctx, types.NamespacedName{Namespace: harness.TenantNamespace, Name: "typo"}, &macvirtv1alpha1.MacClaim{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("claim typo: %v; want none left behind", err)
		}
	})

	if code, out, _ := mac("claim", "demo", "--class", harness.TenantClass, "--access", "NodePort", "--wait", "--timeout", "3m"); code != 0 || !strings.Contains(out, "is Ready after") {
		t.Fatalf("claim --wait: exit %d", code)
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: harness.TenantNamespace, Name: "demo"}, claim); err != nil {
		t.Fatal(err)
	}
	ext := claim.Status.Connection.External
	if ext == nil || ext.Address != "127.0.0.1" || ext.SSHPort < 30000 {
		t.Fatalf("status.connection.external = %+v, want the node's address and a node port", ext)
	}
	if pub := claim.Spec.SSHAuthorizedKeys; len(pub) != 1 || !strings.HasPrefix(pub[0], "ssh-ed25519 ") {
		t.Errorf("spec.sshAuthorizedKeys = %q, want the tenant's id_ed25519.pub", pub)
	}

	t.Run("get shows the claim, its machine and address, one line", func(t *testing.T) {
		code, out, _ := mac("get")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") {
			t.Fatalf("get: exit %d, %q", code, out)
		}
		// ADDRESS is the Mac's pod address, as kubectl get macclaim -o wide
		// says; EXTERNAL is the node port.
		for _, want := range []string{"demo", harness.TenantClass, "Ready", claim.Status.Machine.Name, " " + claim.Status.Connection.Address + " ",
			net.JoinHostPort(ext.Address, strconv.Itoa(int(ext.SSHPort))), "True"} {
			if !strings.Contains(lines[1], want) {
				t.Errorf("get's line %q lacks %q", lines[1], want)
			}
		}
	})

	t.Run("ssh runs a command on the Mac through the claim's NodePort", func(t *testing.T) {
		code, out, _ := mac("ssh", "--via", "direct", "demo", "--", "uname", "-a")
		if code != 0 || !strings.HasPrefix(out, "Darwin ") || !strings.Contains(out, "x86_64") {
			t.Fatalf("ssh demo -- uname -a: exit %d, %q", code, out)
		}
		code, _, errOut := mac("ssh", "--via", "direct", "demo", "--", "rm", "-rf", "/")
		if code != 127 || !strings.Contains(errOut, "command not found") {
			t.Errorf("an unknown command: exit %d, %q; want 127 and command not found", code, errOut)
		}
	})

	t.Run("ssh without a command is a shell, whose exit status it returns", func(t *testing.T) {
		stdin = "hostname\nexit 3\n"
		defer func() { stdin = "" }()
		code, out, _ := mac("ssh", "demo")
		if code != 3 || !strings.Contains(out, "admin@demo-") || !strings.Contains(out, claim.Status.MachineRef.Name+"\r\n") {
			t.Errorf("ssh demo: exit %d, %q; want 3, a prompt, and the hostname", code, out)
		}
	})

	t.Run("ssh with a key the claim did not authorize is refused", func(t *testing.T) {
		code, _, errOut := mac("ssh", "-i", other, "demo", "--", "true")
		if code != 255 || !strings.Contains(errOut, "unable to authenticate") {
			t.Errorf("exit %d, %q; want 255 and an authentication failure", code, errOut)
		}
	})

	t.Run("ssh refuses a server whose host key is not the one the claim's status lists", func(t *testing.T) {
		// An impostor at another address: an SSH server with a key of its
		// own, reached with --address, as a spoofed address would be.
		addr := impostorSSHServer(t, writeKey(t, filepath.Join(dir, "impostor")))
		code, out, errOut := mac("ssh", "--address", addr, "demo", "--", "uname", "-a")
		if code != 255 || out != "" || !strings.Contains(errOut, "host key verification failed") {
			t.Errorf("exit %d, out %q, err %q; want 255, no output, host key verification failed", code, out, errOut)
		}
	})

	t.Run("the Mac's NetworkPolicy lets its tenant's pods in on its ports, and no one else", func(t *testing.T) {
		// A ClusterIP claim: reached at the Mac's pod address, under the
		// machine's policy alone (a node port lets anyone in). The class
		// makes machines on demand, in the claim's namespace; the sample
		// pool keeps idle ones in the pools' namespace.
		if code, _, _ := mac("claim", "inside", "--class", harness.TenantClass, "--access", "ClusterIP", "--wait", "--timeout", "3m"); code != 0 {
			t.Fatalf("claim inside --access ClusterIP: exit %d", code)
		}
		defer mac("release", "inside")
		inside := &macvirtv1alpha1.MacClaim{}
		if err := admin.Get(ctx, types.NamespacedName{Namespace: harness.TenantNamespace, Name: "inside"}, inside); err != nil {
			t.Fatal(err)
		}
		conn := inside.Status.Connection
		if conn == nil || conn.Address == "" || conn.SSHPort == 0 || conn.VNCPort == 0 {
			t.Fatalf("status.connection = %+v, want the Mac's pod address, SSH and Screen Sharing ports", conn)
		}
		const pools = "macvirt-pools" // the sample pool's spec.namespace
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-android"}}); err != nil {
			t.Fatal(err)
		}
		ci := map[string]string{"app": "ci"}
		for _, tc := range []struct {
			name string
			from simulator.Peer
			port int32
			in   bool
		}{
			{"a pod of the claim's namespace", simulator.Peer{Namespace: harness.TenantNamespace, Labels: ci}, conn.SSHPort, true},
			{"a pod of another tenant's namespace", simulator.Peer{Namespace: "team-android", Labels: ci}, conn.SSHPort, false},
			{"a pod of the pools' namespace", simulator.Peer{Namespace: pools, Labels: ci}, conn.SSHPort, false},
			{"an address outside the cluster", simulator.Peer{IP: "203.0.113.7"}, conn.SSHPort, false},
			{"the claim's namespace on Screen Sharing's port", simulator.Peer{Namespace: harness.TenantNamespace, Labels: ci}, conn.VNCPort, true},
			{"another tenant's namespace on Screen Sharing's port", simulator.Peer{Namespace: "team-android", Labels: ci}, conn.VNCPort, false},
			{"the claim's namespace on a port the class does not offer", simulator.Peer{Namespace: harness.TenantNamespace, Labels: ci}, 8080, false},
			{"the operator's pod, for the tunnel", simulator.Peer{Namespace: operator.DefaultNamespace, Labels: operator.PodLabels}, conn.SSHPort, true},
			{"the operator's pod on a port the class does not offer", simulator.Peer{Namespace: operator.DefaultNamespace, Labels: operator.PodLabels}, 8080, false},
			{"another pod of the operator's namespace", simulator.Peer{Namespace: operator.DefaultNamespace, Labels: ci}, conn.SSHPort, false},
			{"a pod with the operator's labels in another namespace", simulator.Peer{Namespace: "team-android", Labels: operator.PodLabels}, conn.SSHPort, false},
			// docs/access.md: the node's own traffic gets past any policy.
			{"the Mac's node, or a pod on its host network", simulator.Peer{HostNetwork: true}, conn.SSHPort, true},
		} {
			got, err := sys.Simulator.DialFrom(ctx, tc.from, net.JoinHostPort(conn.Address, strconv.Itoa(int(tc.port))))
			switch {
			case tc.in && err != nil:
				t.Errorf("%s, port %d: %v; want the Mac's sshd", tc.name, tc.port, err)
			case tc.in:
				want := "SSH-2.0-"
				if tc.port == conn.VNCPort {
					want = "RFB "
				}
				banner := make([]byte, len(want))
				_ = got.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(got, banner); err != nil || string(banner) != want {
					t.Errorf("%s, port %d: read %q, %v; want %q", tc.name, tc.port, banner, err, want)
				}
				_ = got.Close()
			case err == nil:
				_ = got.Close()
				t.Errorf("%s, port %d: connected; want the machine's NetworkPolicy to drop it", tc.name, tc.port)
			case !strings.Contains(err.Error(), "NetworkPolicies"):
				t.Errorf("%s, port %d: %v; want the machine's NetworkPolicy to drop it", tc.name, tc.port, err)
			}
		}

		// An idle machine of the pool lets no one in, its tenant-to-be
		// included.
		deadline := time.Now().Add(time.Minute)
		for {
			ip, ok := idleMachineAddress(ctx, t, admin, pools)
			if ok {
				if c, err := sys.Simulator.DialFrom(ctx, simulator.Peer{Namespace: harness.TenantNamespace, Labels: ci}, net.JoinHostPort(ip, "22")); err == nil {
					_ = c.Close()
					t.Errorf("an idle machine at %s let a tenant's pod in", ip)
				} else if !strings.Contains(err.Error(), "NetworkPolicies") {
					t.Errorf("an idle machine at %s: %v; want its NetworkPolicy to drop it", ip, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no idle machine of the pool running a minute after the claims")
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("from a laptop, through the API server: a ClusterIP claim's ssh, cp, port-forward and vnc", func(t *testing.T) {
		testFromALaptop(ctx, t, env, admin, tenantCfg, dir)
	})

	t.Run("release deletes the claim, and the machine goes with it", func(t *testing.T) {
		code, out, _ := mac("release", "demo", "--wait", "--timeout", "2m")
		if code != 0 || !strings.Contains(out, "is gone") {
			t.Fatalf("release --wait: exit %d, %q", code, out)
		}
		ref := claim.Status.MachineRef
		deadline := time.Now().Add(time.Minute)
		for {
			err := admin.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, &macvirtv1alpha1.MacMachine{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("machine %s/%s still there a minute after its claim was released: %v", ref.Namespace, ref.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("a claim of the same name made right after is reachable too", func(t *testing.T) {
		// The first claim's Service and EndpointSlice go with it
		// (the garbage collector); until they do, the new claim says so.
		if code, _, _ := mac("claim", "demo", "--class", harness.TenantClass, "--wait", "--timeout", "3m"); code != 0 {
			t.Fatalf("claim --wait: exit %d", code)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			code, out, _ := mac("ssh", "demo", "--", "uname", "-a")
			if code == 0 && strings.HasPrefix(out, "Darwin ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ssh to the second claim demo: exit %d, %q", code, out)
			}
			time.Sleep(time.Second)
		}
	})
}

// idleMachineAddress is the pod address of a running launcher pod of an
// unbound machine in the pools' namespace.
func idleMachineAddress(ctx context.Context, t *testing.T, admin client.Client, pools string) (string, bool) {
	t.Helper()
	machines := &macvirtv1alpha1.MacMachineList{}
	if err := admin.List(ctx, machines, client.InNamespace(pools)); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := admin.List(ctx, pods, client.InNamespace(pools), client.MatchingLabels{"kubevirt.io": "virt-launcher"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range machines.Items {
		if m.Spec.ClaimRef != nil {
			continue
		}
		for _, p := range pods.Items {
			if p.Labels["macvirt.io/machine"] == m.Name && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				return p.Status.PodIP, true
			}
		}
	}
	return "", false
}

// writeKey writes a fresh ed25519 private key to path and its public key
// to path.pub, as ssh-keygen would.
func writeKey(t *testing.T, path string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	return signer
}

// impostorSSHServer listens on 127.0.0.1 and offers its host key to every
// client, closing once the client has looked at it; it returns its address.
func impostorSSHServer(t *testing.T, key ssh.Signer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(key)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				if conn, _, _, err := ssh.NewServerConn(c, cfg); err == nil {
					_ = conn.Close()
				}
			}()
		}
	}()
	return l.Addr().String()
}
