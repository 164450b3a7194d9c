package binaries_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/contract/contracttest"
	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

// startedBy names, for every command under cmd/, the test that builds it
// and starts it as its users do; a command without one fails
// TestEveryCommandIsStartedAsItsUsersStartIt.
var startedBy = map[string]struct{ file, fn string }{
	"cmd":                         {"cmd/main_test.go", "TestLocalWebhooks"},
	"cmd/fleeting-plugin-macvirt": {"test/gitlab/gitlab_test.go", "buildPlugin"},
	"cmd/macvirt-host-agent":      {"test/binaries/binaries_test.go", "TestHostAgentStartsAndHeartbeats"},
	"cmd/macvirt-agent":           {"test/binaries/binaries_test.go", "TestGuestAgentStartsAndRefusesOutsideMacOS"},
	"cmd/kubectl-mac":             {"test/binaries/binaries_test.go", "TestKubectlMacStartsAndReadsTheCluster"},
	"cmd/domain-hook":             {"test/binaries/binaries_test.go", "TestDomainHookStartsAsKubeVirtRunsIt"},
	"cmd/macvirt-sandbox":         {"cmd/macvirt-sandbox/main_test.go", "TestSandboxServesUntilInterrupted"},
}

// TestEveryCommandIsStartedAsItsUsersStartIt: a command the tests only
// compile, or only run in-process, can still panic at start (a flag
// registered twice did, in the host agent). Every command under cmd/ has a
// test that starts the built binary, and that test exists.
func TestEveryCommandIsStartedAsItsUsersStartIt(t *testing.T) {
	root := cluster.RepoRoot()
	var commands []string
	err := filepath.WalkDir(filepath.Join(root, "cmd"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path) //nolint:gosec // the repository's own files.
		if err != nil {
			return err
		}
		if regexp.MustCompile(`(?m)^package main$`).Match(b) {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if len(commands) == 0 || commands[len(commands)-1] != rel {
				commands = append(commands, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(commands) < 7 {
		t.Fatalf("found only %v under cmd/", commands)
	}
	for _, c := range commands {
		by, ok := startedBy[c]
		if !ok {
			t.Errorf("%s: no test starts the built binary; add one here (as the host agent's) and name it in startedBy", c)
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, by.file)) //nolint:gosec // a file of the repository named above.
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		if !strings.Contains(string(b), "func "+by.fn+"(") {
			t.Errorf("%s: %s has no func %s", c, by.file, by.fn)
		}
	}
}

// buildCommand builds ./cmd/NAME for this machine, with -ldflags's version
// set as a release sets it, into dir.
func buildCommand(t *testing.T, dir, name, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(name))
	args := []string{"build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.Command("go", append(args, "./"+name)...) //nolint:gosec,noctx // the repository's own command.
	cmd.Dir = cluster.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", name, err, b)
	}
	return out
}

// TestHostAgentStartsAndHeartbeats runs the host agent's binary as its
// LaunchDaemon does (docs/apple-silicon-hosts.md): with the kubeconfig of
// its ServiceAccount's token under the shipped role, driving tart (here the fake,
// which answers as tart does). It registers its MacHost and heartbeats
// with the version the release built in, and stops cleanly on SIGTERM.
func TestHostAgentStartsAndHeartbeats(t *testing.T) {
	cluster.NeedsAPIServer(t)
	w := harness.ForTest(t, harness.Options{Log: io.Discard})
	ctx := w.Ctx
	const host = "binary-mac"
	for _, obj := range shippedRBAC(t, w, "host_agent_role.yaml") {
		if err := w.Admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kubeconfig := hostKubeconfig(t, w, host, filepath.Join(dir, "kubeconfig"))
	// The agent endpoint's host routes, as the operator serves them: the
	// agent holds its tunnel connection there from its start (it fetches a
	// VM's configuration there too, which this test starts none of).
	hosts := &tunnel.Hosts{}
	srv := httptest.NewTLSServer(&guestendpoint.Handler{Hosts: &guestendpoint.HostConfigHandler{Client: w.Admin, Tunnels: hosts}})
	defer srv.Close()
	srvCA := filepath.Join(dir, "srv-ca.crt")
	if err := os.WriteFile(srvCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := srvCA
	tartBin, err := build.To(dir)
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "tart-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := build.WriteKnobs(home, build.Knobs{}); err != nil {
		t.Fatal(err)
	}
	const version = "v0.0.0-binary-test"
	bin := buildCommand(t, dir, "cmd/macvirt-host-agent", "-X main.version="+version)

	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != version { //nolint:gosec,noctx // the binary just built.
		t.Fatalf("macvirt-host-agent --version: %v: %q, want %q", err, out, version)
	}
	// Started as a LaunchDaemon with launchd's bare environment, it says
	// what is missing instead of failing at the first VM.
	args := []string{"--kubeconfig=" + kubeconfig, "--host=" + host, "--state-dir=" + filepath.Join(dir, "state"),
		"--endpoint=" + srv.URL, "--endpoint-ca=" + ca}
	for _, tc := range []struct {
		env  []string
		args []string
		says string
	}{
		{[]string{"PATH=/usr/bin:/bin"}, []string{"--tart=" + tartBin}, "HOME is not set"},
		{[]string{"PATH=/usr/bin:/bin", "HOME=" + dir}, nil, `--tart "tart"`},
	} {
		cmd := exec.Command(bin, append(args, tc.args...)...) //nolint:gosec,noctx // the binary just built.
		cmd.Env = tc.env
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.says) {
			t.Errorf("macvirt-host-agent with only %v: %v: %s; want exit 1 saying %q", tc.env, err, out, tc.says)
		}
	}
	agent := cluster.StartProcess(t, dir, []string{"TART_HOME=" + home}, bin, "--kubeconfig="+kubeconfig, "--host="+host,
		"--tool=tart", "--tart="+tartBin, "--state-dir="+filepath.Join(dir, "state"), "--lease=10s",
		"--endpoint="+srv.URL, "--endpoint-ca="+ca)
	h := &macvirtv1alpha1.MacHost{}
	eventually(t, agent, 2*time.Minute, "the agent registers MacHost "+host+" and reports tart reachable", func() error {
		if err := w.Admin.Get(ctx, client.ObjectKey{Name: host}, h); err != nil {
			return err
		}
		r := h.Status.Agent
		if r == nil || r.LastHeartbeat == nil {
			return fmt.Errorf("no heartbeat yet")
		}
		if r.AgentVersion != version || r.Tool != "tart" {
			return fmt.Errorf("the report names version %q and tool %q", r.AgentVersion, r.Tool)
		}
		c := meta.FindStatusCondition(r.Conditions, macvirtv1alpha1.HostConditionToolReachable)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ToolReachable is %v", c)
		}
		// The tool's version, read from "tart --version".
		if c := meta.FindStatusCondition(r.Conditions, macvirtv1alpha1.HostConditionToolOutdated); c == nil ||
			c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "tart 2.32.1") {
			return fmt.Errorf("ToolOutdated is %v", c)
		}
		return nil
	})
	first := h.Status.Agent.LastHeartbeat.Time
	eventually(t, agent, time.Minute, "a second heartbeat", func() error {
		if err := w.Admin.Get(ctx, client.ObjectKey{Name: host}, h); err != nil {
			return err
		}
		if !h.Status.Agent.LastHeartbeat.After(first) {
			return fmt.Errorf("the heartbeat of %s is the first still", first)
		}
		return nil
	})
	// Its tunnel connection, out to the endpoint with its token: asked for
	// a machine that is not on its Mac, or a port it never carries, it
	// answers why, in its words, over the connection it brings back.
	eventually(t, agent, time.Minute, "the agent holds its tunnel connection", func() error {
		if !hosts.Connected(host) {
			return errors.New("not connected")
		}
		return nil
	})
	for _, tc := range []struct {
		port int32
		says string
	}{{22, "no machine of that name and UID is placed on MacHost " + host}, {8080, "carries no tunnel to port 8080"}} {
		_, err := hosts.Dial(ctx, host, guestprotocol.MachineRef{Namespace: "elsewhere", Name: "m"}, "some-uid", tc.port)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("a tunnel to port %d of a machine not on the Mac: %v; want the agent to say %q", tc.port, err, tc.says)
		}
	}
	agent.Stop(t, syscall.SIGTERM)
	for deadline := time.Now().Add(30 * time.Second); hosts.Connected(host); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped agent's tunnel connection did not end within 30s")
		}
	}

	// "macvirt-host-agent doctor" with the agent's own flags checks the Mac
	// as the agent runs there, and starts nothing. Off macOS what only a
	// Mac tells is unknown; the rest is checked for real: the fake tart's
	// answers and version, the token's identity, and the endpoint's TLS.
	doctor := func(hostName string) (string, int) {
		cmd := exec.Command(bin, "doctor", "--kubeconfig="+kubeconfig, "--host="+hostName, "--tool=tart", "--tart="+tartBin, //nolint:gosec,noctx // the binary just built.
			"--state-dir="+filepath.Join(dir, "state"), "--endpoint="+srv.URL, "--endpoint-ca="+srvCA, "--min-free-disk=1Mi")
		cmd.Env = append(os.Environ(), "TART_HOME="+home)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := doctor(host)
	t.Logf("macvirt-host-agent doctor:\n%s", out)
	for _, want := range []string{"environment     ok", "tool            ok       tart answers: 0 of 2 VMs run", "tool version    ok       tart 2.32.1",
		"identity        ok       the kubeconfig is system:serviceaccount:macvirt-hosts:" + host, "agent endpoint  ok",
		"Local Network   check"} {
		if !strings.Contains(out, want) {
			t.Errorf("the doctor does not say %q", want)
		}
	}
	if code != 0 || strings.Contains(out, "FAILED") {
		t.Errorf("the doctor exited %d; want 0 with no check FAILED", code)
	}
	out, code = doctor("another-mac")
	if code != 1 || !strings.Contains(out, "identity        FAILED   the kubeconfig is system:serviceaccount:macvirt-hosts:"+host+", not system:serviceaccount:macvirt-hosts:another-mac") {
		t.Errorf("the doctor of the wrong host exited %d: %s; want 1 with identity FAILED", code, out)
	}
}

// TestGuestAgentStartsAndRefusesOutsideMacOS: the guest agent runs inside
// macOS only (its platform reads macOS's volumes and tools), so here its
// binary shows that it starts (flags, every package's init), prints the
// version a release gives it, and refuses to run with the reason; it is
// also built for both Macs it ships to. What it does in macOS needs a
// real Mac: hack/smoke-apple-silicon.sh.
func TestGuestAgentStartsAndRefusesOutsideMacOS(t *testing.T) {
	dir := t.TempDir()
	bin := buildCommand(t, dir, "cmd/macvirt-agent", "")
	out, err := exec.Command(bin, "--version").CombinedOutput() //nolint:gosec,noctx // the binary just built.
	if err != nil || strings.TrimSpace(string(out)) != guestagent.Version {
		t.Fatalf("macvirt-agent --version: %v: %q, want %q", err, out, guestagent.Version)
	}
	out, err = exec.Command(bin).CombinedOutput() //nolint:gosec,noctx // the binary just built.
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "runs inside macOS only") {
		t.Fatalf("macvirt-agent outside macOS: %v: %q, want exit 1 saying it runs inside macOS only", err, out)
	}
	for _, arch := range []string{"arm64", "amd64"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "macvirt-agent-darwin-"+arch), "./cmd/macvirt-agent") //nolint:gosec,noctx // the repository's own command.
		cmd.Dir = cluster.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=darwin", "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build ./cmd/macvirt-agent for darwin/%s: %v\n%s", arch, err, b)
		}
	}
}

// TestKubectlMacStartsAndReadsTheCluster runs kubectl-mac as kubectl runs a
// plugin: the binary on its own, with the user's kubeconfig in KUBECONFIG.
func TestKubectlMacStartsAndReadsTheCluster(t *testing.T) {
	cluster.NeedsAPIServer(t)
	w := harness.ForTest(t, harness.Options{Log: io.Discard})
	dir := t.TempDir()
	if err := w.Admin.Create(w.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-bin"}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := userKubeconfig(t, w, envtest.User{Name: "binary-admin", Groups: []string{"system:masters"}}, filepath.Join(dir, "kubeconfig"))
	bin := buildCommand(t, dir, "cmd/kubectl-mac", "")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, args...) //nolint:gosec,noctx // the binary just built.
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("get", "-n", "team-bin", "-o", "json"); code != 0 || !strings.Contains(out, `"items"`) {
		t.Errorf("kubectl-mac get -n team-bin -o json: exit %d: %s", code, out)
	}
	if out, code := run("wait", "-n", "team-bin", "missing"); code == 0 || !strings.Contains(out, "missing") {
		t.Errorf("kubectl-mac wait of a claim that does not exist: exit %d: %s; want a failure naming it", code, out)
	}
	if out, code := run("no-such-command"); code != 2 {
		t.Errorf("kubectl-mac no-such-command: exit %d, want 2: %s", code, out)
	}
}

// TestDomainHookStartsAsKubeVirtRunsIt runs the hook's binary both ways
// KubeVirt runs it: as the sidecar-shim's onDefineDomain (one domain in, the
// changed domain out) and as a Plugin sidecar serving MutateDomain on its
// socket until SIGTERM.
func TestDomainHookStartsAsKubeVirtRunsIt(t *testing.T) {
	dir, err := os.MkdirTemp("", "hook") // short: a unix socket's path is at most 108 bytes.
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := buildCommand(t, dir, "cmd/domain-hook", "")
	domain, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "internal", "domainhook", "hook", "testdata", "kubevirt", "default.domain.xml"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := contracttest.Config().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	vmi, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "m", "namespace": "ns",
		"annotations": map[string]string{contract.Annotation: raw}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--vmi", string(vmi), "--domain", string(domain)).Output() //nolint:gosec,noctx // the binary just built.
	if err != nil || !strings.Contains(string(out), "manufacturer=Apple Inc.") {
		t.Fatalf("onDefineDomain --vmi --domain: %v; want the domain with the Mac's SMBIOS (manufacturer=Apple Inc.):\n%s", err, out)
	}

	socket := filepath.Join(dir, "macvirt-macos", "hook.sock")
	hook := cluster.StartProcess(t, dir, nil, bin, "--plugin-socket", socket, "--emulator-path", "/usr/bin/qemu-system-x86_64")
	deadline := time.Now().Add(time.Minute)
	for {
		if info, err := os.Stat(socket); err == nil && info.Mode().Perm() == 0o660 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket of mode 0660 within a minute:\n%s", hook.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// A MutateDomainRequest (domain_type 1, domain 2, vmi 3) for a VMI
	// macvirt did not render: the hook answers, refusing it.
	req := append(append(protoField(1, []byte("libvirt")), protoField(2, domain)...), protoField(3, []byte(`{"metadata":{"name":"m"}}`))...)
	var resp []byte
	callCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = conn.Invoke(callCtx, "/kubevirt.hooks.plugins.v1alpha1.DomainHookService/MutateDomain", &req, &resp)
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("MutateDomain of a VMI without the annotation: %v, want InvalidArgument\n%s", err, hook.Output())
	}
	hook.Stop(t, syscall.SIGTERM)
}

// rawCodec hands gRPC the bytes the test encoded itself.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// protoField encodes one length-delimited proto field.
func protoField(num byte, v []byte) []byte {
	out := binary.AppendUvarint([]byte{num<<3 | 2}, uint64(len(v)))
	return append(out, v...)
}

// userKubeconfig writes a kubeconfig for user, authenticated by a client
// certificate of its own, to path.
func userKubeconfig(t *testing.T, w *harness.World, user envtest.User, path string) string {
	t.Helper()
	u, err := w.Cluster.AddUser(user, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// hostKubeconfig writes the kubeconfig an admin gives a Mac's agent
// (docs/apple-silicon-hosts.md): a token of its ServiceAccount in
// macvirt-hosts.
func hostKubeconfig(t *testing.T, w *harness.World, host, path string) string {
	t.Helper()
	ctx := w.Ctx
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: macvirtv1alpha1.HostAgentNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: macvirtv1alpha1.HostAgentNamespace, Name: host}},
	} {
		if err := w.Admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(w.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(macvirtv1alpha1.HostAgentNamespace).CreateToken(ctx, host, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["macvirt"] = &clientcmdapi.Cluster{Server: w.Config.Host, CertificateAuthorityData: w.Config.CAData}
	cfg.AuthInfos[host] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["macvirt"] = &clientcmdapi.Context{Cluster: "macvirt", AuthInfo: host}
	cfg.CurrentContext = "macvirt"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// shippedRBAC reads a file of config/rbac as the cluster's objects.
func shippedRBAC(t *testing.T, w *harness.World, file string) []client.Object {
	t.Helper()
	objs, err := harness.ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", file), w.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// eventually polls check until it passes, failing with the process's
// output when it has not within d, or when the process exits.
func eventually(t *testing.T, p *cluster.Process, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case exit := <-p.Exited():
			t.Fatalf("%s: the process exited (%v) first:\n%s", what, exit, p.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v\n%s", what, d, err, p.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
