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
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/kubectlmac"
	"github.com/macvirt/macvirt/internal/sandbox"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/internal/testenv"
)

func TestATenantClaimsAndReachesTheirMacWithKubectlMac(t *testing.T) {
	testenv.NeedsAPIServer(t)
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scheme, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := sandbox.StartCluster(scheme)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	cfg, env := cluster.Config, cluster.Environment
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := sandbox.StartSystem(ctx, cfg, scheme, sandbox.SystemOptions{Options: sandbox.Options{Speed: 4}, Network: true})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); sys.Stop() })
	if err := sandbox.ApplySamples(ctx, admin, 1); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.SetUpTenant(ctx, admin, sandbox.TenantUser, sandbox.TenantNamespace); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.ApplyTenantClass(ctx, admin); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "tenant.kubeconfig")
	if err := sandbox.WriteTenantKubeconfig(env, sandbox.TenantUser, sandbox.TenantNamespace, kubeconfig); err != nil {
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

	t.Run("the kubeconfig is the tenant's, not an admin's", func(t *testing.T) {
		tenantCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(tenantCfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		err = c.List(ctx, &macvirtv1alpha1.MacMachineList{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing MacMachines as the tenant: %v, want Forbidden", err)
		}
	})

	if code, out, _ := mac("claim", "demo", "--class", sandbox.TenantClass, "--wait", "--timeout", "3m"); code != 0 || !strings.Contains(out, "is Ready after") {
		t.Fatalf("claim --wait: exit %d", code)
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: sandbox.TenantNamespace, Name: "demo"}, claim); err != nil {
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
		for _, want := range []string{"demo", sandbox.TenantClass, "Ready", claim.Status.Machine.Name, "127.0.0.1:", "True"} {
			if !strings.Contains(lines[1], want) {
				t.Errorf("get's line %q lacks %q", lines[1], want)
			}
		}
	})

	t.Run("ssh runs a command on the Mac through the claim's NodePort", func(t *testing.T) {
		code, out, _ := mac("ssh", "demo", "--", "uname", "-a")
		if code != 0 || !strings.HasPrefix(out, "Darwin ") || !strings.Contains(out, "x86_64") {
			t.Fatalf("ssh demo -- uname -a: exit %d, %q", code, out)
		}
		code, _, errOut := mac("ssh", "demo", "--", "rm", "-rf", "/")
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

	t.Run("vnc says the class offers no Screen Sharing", func(t *testing.T) {
		code, _, errOut := mac("vnc", "demo")
		if code != 1 || !strings.Contains(errOut, "spec.access.screenSharing") {
			t.Errorf("vnc: exit %d, %q", code, errOut)
		}
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
		if code, _, _ := mac("claim", "demo", "--class", sandbox.TenantClass, "--wait", "--timeout", "3m"); code != 0 {
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
