package access_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/kubectlmac"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/test/harness"
)

// testFromALaptop is the tenant's laptop: its kubeconfig reaches the API
// server and nothing else (a ClusterIP claim has no node port, and the
// pod network is the simulator's alone), so every byte to the Mac goes
// through the operator's tunnel, authorised by the shipped role.
func testFromALaptop(ctx context.Context, t *testing.T, env *envtest.Environment, admin client.Client, tenantCfg *rest.Config, dir string) {
	run := func(in io.Reader, args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := kubectlmac.Main(ctx, args, kubectlmac.Streams{In: in, Out: &out, Err: &errOut})
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run(strings.NewReader(""), "claim", "laptop", "--class", harness.TenantClass, "--wait", "--timeout", "3m"); code != 0 {
		t.Fatalf("claim laptop --wait: exit %d, %s%s", code, out, errOut)
	}
	defer run(strings.NewReader(""), "release", "laptop")
	claim := &macvirtv1alpha1.MacClaim{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: harness.TenantNamespace, Name: "laptop"}, claim); err != nil {
		t.Fatal(err)
	}
	if conn := claim.Status.Connection; conn == nil || conn.External != nil || claim.Spec.Access.Type != "" && claim.Spec.Access.Type != macvirtv1alpha1.AccessClusterIP {
		t.Fatalf("claim laptop: access %q, connection %+v; want ClusterIP, nothing external", claim.Spec.Access.Type, conn)
	}

	t.Run("ssh with piped stdin, 100 runs, each with the remote command's exit status", func(t *testing.T) {
		commands := []struct {
			cmd  string
			want int
		}{{"true", 0}, {"false", 1}, {"nosuch", 127}, {"uname -s", 0}}
		var wrong []string
		for i := range 100 {
			c := commands[i%len(commands)]
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				defer func() { _ = w.Close() }()
				for range 64 { // input the command never reads
					if _, err := io.WriteString(w, "input the Mac does not read\n"); err != nil {
						return
					}
				}
			}()
			code, out, errOut := run(r, "ssh", "laptop", "--", c.cmd)
			_ = r.Close()
			if code != c.want || (c.cmd == "uname -s" && out != "Darwin\n") {
				wrong = append(wrong, fmt.Sprintf("run %d (%s): exit %d, want %d; %q %q", i, c.cmd, code, c.want, out, errOut))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%d of 100 runs wrong:\n%s", len(wrong), strings.Join(wrong, "\n"))
		}
	})

	t.Run("cp copies a file to the Mac and back, and says what is missing", func(t *testing.T) {
		payload := make([]byte, 1<<20)
		if _, err := rand.Read(payload); err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(dir, "payload.bin")
		if err := os.WriteFile(local, payload, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := run(nil, "cp", local, "laptop:payload.bin"); code != 0 {
			t.Fatalf("cp to the Mac: exit %d, %s%s", code, out, errOut)
		}
		back := filepath.Join(dir, "back.bin")
		if code, out, errOut := run(nil, "cp", "laptop:payload.bin", back); code != 0 {
			t.Fatalf("cp from the Mac: exit %d, %s%s", code, out, errOut)
		}
		got, err := os.ReadFile(back) //nolint:gosec // the test's own file.
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("the copy back: %d bytes, %v; want the 1 MiB sent", len(got), err)
		}
		code, _, errOut := run(nil, "cp", "laptop:nosuch.txt", filepath.Join(dir, "nosuch.txt"))
		if code != 1 || !strings.Contains(errOut, "laptop:nosuch.txt: cat: nosuch.txt: No such file or directory") {
			t.Errorf("cp of a missing file: exit %d, %q", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "nosuch.txt")); !os.IsNotExist(err) {
			t.Errorf("cp of a missing file left %s behind: %v", filepath.Join(dir, "nosuch.txt"), err)
		}
	})

	t.Run("port-forward carries local connections to the Mac's SSH port", func(t *testing.T) {
		addr, stop := background(ctx, t, "port-forward", "laptop", "0:22")
		conn, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(addr, "Forwarding from "), " -> 22"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		expectBanner(t, conn, "SSH-2.0-OpenSSH")
		if code := stop(); code != 0 {
			t.Errorf("port-forward ended with exit %d, want 0 on Ctrl-C", code)
		}
	})

	t.Run("vnc forwards a local port to Screen Sharing", func(t *testing.T) {
		url, stop := background(ctx, t, "vnc", "laptop")
		host, ok := strings.CutPrefix(url, "vnc://127.0.0.1:")
		if !ok {
			t.Fatalf("vnc printed %q, want vnc://127.0.0.1:PORT", url)
		}
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+host, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		expectBanner(t, conn, "RFB 003.889")
		if code := stop(); code != 0 {
			t.Errorf("vnc ended with exit %d, want 0 on Ctrl-C", code)
		}
	})

	t.Run("the tunnel opens only the class's ports of the tenant's own claims", func(t *testing.T) {
		_, err := tunnel.Dial(ctx, tenantCfg, harness.TenantNamespace, "laptop", 8080)
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "port 8080 of macclaim team-ios/laptop is not open") {
			t.Errorf("a tunnel to port 8080: %v; want 503 naming the ports open", err)
		}
		// Another namespace's tenant, with the same shipped roles there.
		if err := harness.SetUpTenant(ctx, admin, "mallory", "team-android"); err != nil {
			t.Fatal(err)
		}
		kubeconfig := filepath.Join(dir, "mallory.kubeconfig")
		if err := harness.WriteTenantKubeconfig(env, "mallory", "team-android", kubeconfig); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(nil, "--kubeconfig", kubeconfig, "-n", harness.TenantNamespace, "ssh", "laptop", "--via", "tunnel", "--", "true")
		if code != 255 || !strings.Contains(errOut, "forbidden") {
			t.Errorf("another tenant's ssh to laptop: exit %d, %q %q; want 255, forbidden", code, out, errOut)
		}
		mallory, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tunnel.Dial(ctx, mallory, harness.TenantNamespace, "laptop", 22)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `macclaims.subresources.macvirt.io "laptop" is forbidden`) {
			t.Errorf("another tenant's tunnel to laptop: %v; want Forbidden by the API server", err)
		}
	})
}

// background runs kubectl mac in the background until the returned stop
// (its Ctrl-C), which gives its exit code; first is its first line of
// output.
func background(ctx context.Context, t *testing.T, args ...string) (first string, stop func() int) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	r, w := io.Pipe()
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		done <- kubectlmac.Main(runCtx, args, kubectlmac.Streams{In: strings.NewReader(""), Out: w, Err: &errOut})
		_ = w.Close()
	}()
	lines := bufio.NewScanner(r)
	if !lines.Scan() {
		cancel()
		t.Fatalf("kubectl mac %s printed nothing: exit %d, %s", strings.Join(args, " "), <-done, errOut.String())
	}
	first = lines.Text()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return first, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatalf("kubectl mac %s did not end within 30 s of its Ctrl-C", strings.Join(args, " "))
			return -1
		}
	}
}

func expectBanner(t *testing.T, conn net.Conn, want string) {
	t.Helper()
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
		t.Errorf("read %q, %v; want %q", got, err, want)
	}
}
