package kubectlmac

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// parseCommand parses args for the command name as Main does (the global
// flags too), returning what runs and its arguments.
func parseCommand(t *testing.T, name string, args ...string) (runner, []string) {
	t.Helper()
	for _, c := range commands {
		if strings.Fields(c.use)[0] != name {
			continue
		}
		cmd := &cobra.Command{Use: c.use}
		r := c.flags(cmd.Flags())
		genericclioptions.NewConfigFlags(true).AddFlags(cmd.Flags())
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return r, withDash(cmd, cmd.Flags().Args())
	}
	t.Fatalf("no command %s", name)
	return nil, nil
}

func TestFlagsMayFollowTheName(t *testing.T) {
	r, args := parseCommand(t, "ssh", "demo", "-i", "key", "-n", "team", "--via", "direct", "--", "uname", "-a")
	if want := []string{"demo", "--", "uname", "-a"}; !reflect.DeepEqual(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if c := r.(*sshCmd); c.login.identity != "key" || c.login.route.via != viaDirect {
		t.Errorf("flags: %+v", c.login)
	}
}

func TestDirectTarget(t *testing.T) {
	claim := func(conn *macvirtv1alpha1.ClaimConnection) *macvirtv1alpha1.MacClaim {
		c := &macvirtv1alpha1.MacClaim{}
		c.Name, c.Namespace, c.Status.Connection = "build", "team", conn
		return c
	}
	for name, tc := range map[string]struct {
		claim *macvirtv1alpha1.MacClaim
		port  int32
		want  string
	}{
		"inside the cluster, the Service's name": {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", Address: "10.244.1.2", SSHPort: 22}), 22, "build.team.svc:22"},
		"a NodePort":                             {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", External: &macvirtv1alpha1.ExternalAccess{Address: "192.0.2.4", SSHPort: 31022}}), 22, "192.0.2.4:31022"},
		"a NodePort's Screen Sharing":            {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", VNCPort: 5900, External: &macvirtv1alpha1.ExternalAccess{Address: "192.0.2.4", SSHPort: 31022, VNCPort: 31590}}), 5900, "192.0.2.4:31590"},
		"a port the NodePort does not forward":   {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", External: &macvirtv1alpha1.ExternalAccess{Address: "192.0.2.4", SSHPort: 31022}}), 5900, "build.team.svc:5900"},
		"a load balancer still provisioning":     {claim(&macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", SSHPort: 22, External: &macvirtv1alpha1.ExternalAccess{SSHPort: 22}}), 22, "build.team.svc:22"},
		"an IPv6 address":                        {claim(&macvirtv1alpha1.ClaimConnection{Address: "fd00::5", SSHPort: 22}), 22, "[fd00::5]:22"},
	} {
		if got, err := directTarget(tc.claim, tc.port); err != nil || got != tc.want {
			t.Errorf("%s: directTarget = %q, %v; want %q", name, got, err, tc.want)
		}
	}
	if _, err := directTarget(claim(nil), 22); err == nil {
		t.Error("a claim without a connection has a target")
	}
	onHost := claim(&macvirtv1alpha1.ClaimConnection{SSHPort: 22, User: "admin"})
	onHost.Status.Phase = macvirtv1alpha1.ClaimReady
	if _, err := directTarget(onHost, 22); err == nil || !strings.Contains(err.Error(), "--via tunnel") {
		t.Errorf("a Ready claim of a Mac behind its host's NAT, directly: %v; want the tunnel named", err)
	}
	_, _, err := routeFlags{address: "no-port"}.connect(context.Background(), &Env{}, claim(&macvirtv1alpha1.ClaimConnection{Host: "h"}), 22, time.Second)
	if err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("a bad --address: %v", err)
	}
}

func TestVNCURL(t *testing.T) {
	c := &macvirtv1alpha1.MacClaim{}
	c.Name, c.Namespace, c.Spec.ClassName = "build", "team", "sonoma"
	c.Status.Connection = &macvirtv1alpha1.ClaimConnection{Host: "build.team.svc", SSHPort: 22}
	if _, err := vncURL(c); err == nil || !strings.Contains(err.Error(), "spec.access.screenSharing") {
		t.Errorf("no Screen Sharing: %v", err)
	}
	c.Status.Connection.VNCPort = 5900
	if got, _ := vncURL(c); got != "vnc://build.team.svc:5900" {
		t.Errorf("vncURL = %q", got)
	}
	c.Status.Connection.External = &macvirtv1alpha1.ExternalAccess{Address: "192.0.2.4", SSHPort: 31022, VNCPort: 31590}
	if got, _ := vncURL(c); got != "vnc://192.0.2.4:31590" {
		t.Errorf("vncURL = %q, want the node port", got)
	}
}

func newKey(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHostKeysAreCheckedStrictly(t *testing.T) {
	mac, other := newKey(t), newKey(t)
	line := func(s ssh.Signer) string {
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
	}
	keys, err := parseHostKeys([]string{line(mac)})
	if err != nil || len(keys) != 1 {
		t.Fatalf("parseHostKeys: %v, %d keys", err, len(keys))
	}
	if err := keys.check("192.0.2.4:31022", nil, mac.PublicKey()); err != nil {
		t.Errorf("the Mac's own key, reached by a node's address: %v", err)
	}
	if err := keys.check("192.0.2.4:31022", nil, other.PublicKey()); err == nil || !strings.Contains(err.Error(), "host key verification failed") {
		t.Errorf("another key: %v", err)
	}
	if keys, err := parseHostKeys([]string{line(mac) + " root@mac", line(other)}); err != nil || len(keys) != 2 {
		t.Errorf("two keys, one with a comment: %v, %d keys", err, len(keys))
	}
	if _, err := parseHostKeys([]string{"not-a-key"}); err == nil {
		t.Error("a malformed host key parses")
	}
	if _, err := parseHostKeys([]string{"build.team.svc " + line(mac)}); err == nil {
		t.Error("a known_hosts line (a host name before the key) is taken for a plain host key")
	}
	if keys, err := parseHostKeys(nil); err != nil || len(keys) != 0 {
		t.Errorf("no host keys: %v, %d keys", err, len(keys))
	}
	if _, err := parseHostKeys([]string{"cert-authority " + line(other)}); err == nil || !strings.Contains(err.Error(), "cert-authority") {
		t.Errorf("a key with options: %v, want it refused", err)
	}
	if _, err := parseHostKeys([]string{line(mac) + "\n" + line(other)}); err == nil {
		t.Error("two keys in one entry parse")
	}
	if got := keys.algorithms(); !reflect.DeepEqual(got, []string{ssh.KeyAlgoED25519}) {
		t.Errorf("algorithms = %q, want the listed key's only", got)
	}
}

func TestKeysComeFromTheUsersSSHDirectory(t *testing.T) {
	home := t.TempDir()
	if _, err := publicKey("", home); err == nil || !strings.Contains(err.Error(), "ssh-keygen") {
		t.Errorf("no key: %v", err)
	}
	t.Setenv("SSH_AUTH_SOCK", "")
	if _, _, err := authMethods("", home); err == nil || !strings.Contains(err.Error(), "give -i FILE") {
		t.Errorf("no identity: %v", err)
	}
	s := newKey(t)
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey())))
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_rsa.pub"), []byte(pub+" me@laptop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := publicKey("", home); err != nil || got != pub+" me@laptop" {
		t.Errorf("publicKey = %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(home, "bad.pub"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := publicKey(filepath.Join(home, "bad.pub"), home); err == nil || !strings.Contains(err.Error(), "not an SSH public key") {
		t.Errorf("a bad --ssh-key: %v", err)
	}
}

func TestUsageAndUnknownCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--help"}, Streams{Out: &out, Err: &errOut}); code != 0 ||
		!strings.Contains(out.String(), "kubectl mac [command]") || !strings.Contains(out.String(), "port-forward") {
		t.Errorf("--help: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"claim", "--help"}, Streams{Out: &out, Err: &errOut}); code != 0 ||
		!strings.Contains(out.String(), "kubectl mac claim NAME --class CLASS") || !strings.Contains(out.String(), "--pool") {
		t.Errorf("claim --help: exit %d, %q", code, out.String())
	}
	if code := Main(context.Background(), []string{"launch"}, Streams{Out: &out, Err: &errOut}); code != 2 || !strings.Contains(errOut.String(), `unknown command "launch"`) {
		t.Errorf("an unknown command: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := Main(context.Background(), []string{"get", "--bogus"}, Streams{Out: &out, Err: &errOut}); code != 2 || !strings.Contains(errOut.String(), "unknown flag: --bogus") {
		t.Errorf("an unknown flag: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	if code := Main(context.Background(), []string{"claim", "demo"}, Streams{Out: &out, Err: &errOut}); code == 0 {
		t.Errorf("claim without a kubeconfig or --class: exit 0")
	}
}

func TestCompletionAndVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"completion", "bash"}, Streams{Out: &out, Err: &errOut}); code != 0 || !strings.Contains(out.String(), "bash completion") {
		t.Errorf("completion bash: exit %d, %.200q %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"version", "--client"}, Streams{Out: &out, Err: &errOut}); code != 0 || !strings.HasPrefix(out.String(), "kubectl-mac ") {
		t.Errorf("version --client: exit %d, %q", code, out.String())
	}
}

// Global flags may come before the command, as kubectl's do.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	var noCmd bytes.Buffer
	if code := Main(context.Background(), []string{"-n", "team"}, Streams{Out: &noCmd, Err: &noCmd}); code != 2 || !strings.Contains(noCmd.String(), "give a command") {
		t.Errorf("kubectl mac -n team: exit %d, %q; want 2 and no command", code, noCmd.String())
	}
	// The namespace reaches the command: without a kubeconfig, reading it
	// is what fails, not the command line.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"-n", "team", "get"}, Streams{Out: &out, Err: &errOut}); code != 1 || !strings.Contains(errOut.String(), "reading the kubeconfig") {
		t.Errorf("kubectl mac -n team get: exit %d, %q; want the kubeconfig read to fail", code, errOut.String())
	}
}
