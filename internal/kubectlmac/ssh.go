package kubectlmac

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/term"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// defaultIdentities are the private keys ssh tries when -i is not given, as
// OpenSSH does.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// sshLogin is how ssh and cp log in: the key, the way to the Mac, the
// timeout.
type sshLogin struct {
	identity string
	route    routeFlags
	timeout  time.Duration
}

func (l *sshLogin) register(fs *flag.FlagSet) {
	fs.StringVarP(&l.identity, "identity", "i", "", "the private key to log in with (default: ssh-agent, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	l.route.register(fs, true)
	fs.DurationVar(&l.timeout, "connect-timeout", 30*time.Second, "how long to wait for the connection")
}

type sshCmd struct{ login sshLogin }

func sshFlags(fs *flag.FlagSet) runner {
	c := &sshCmd{}
	c.login.register(fs)
	return c
}

func (c *sshCmd) run(ctx context.Context, env *Env, args []string) (int, error) {
	if len(args) == 0 || args[0] == "--" {
		return 2, errors.New("give the claim's name: kubectl mac ssh NAME [-- COMMAND...]")
	}
	name, command := args[0], args[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	// As OpenSSH, every failure of its own is exit status 255, so that a
	// remote command's own status is never mistaken for one.
	cl, err := c.login.dial(ctx, env, name)
	if err != nil {
		return 255, err
	}
	defer func() { _ = cl.Close() }()
	// Ctrl-C (the context's end) closes the connection, ending the session.
	stop := context.AfterFunc(ctx, func() { _ = cl.Close() })
	defer stop()
	session, err := cl.NewSession()
	if err != nil {
		return 255, err
	}
	defer func() { _ = session.Close() }()
	session.Stdout, session.Stderr = env.Out, env.Err
	feed, err := stdinFrom(session, env.In)
	if err != nil {
		return 255, err
	}
	if len(command) > 0 {
		if err := session.Start(strings.Join(command, " ")); err != nil {
			return 255, err
		}
		feed()
		return exitCode(session.Wait())
	}
	return interactive(session, env, feed)
}

// dial logs in to claim name's Mac as the claim's user with the user's
// key, checking its host key against the claim's status, by the route the
// flags choose.
func (l *sshLogin) dial(ctx context.Context, env *Env, name string) (*ssh.Client, error) {
	identity, route, timeout := l.identity, l.route, l.timeout
	conn, err := connection(ctx, env, name)
	if err != nil {
		return nil, err
	}
	auth, closeAuth, err := authMethods(identity, env.Home)
	if err != nil {
		return nil, err
	}
	defer closeAuth()
	cfg := &ssh.ClientConfig{User: conn.user, Auth: auth, HostKeyCallback: conn.hostKeys.check,
		HostKeyAlgorithms: conn.hostKeys.algorithms(), Timeout: timeout}
	raw, target, err := route.connect(ctx, env, conn.claim, sshPort(conn.claim), timeout)
	if err != nil {
		return nil, err
	}
	// The handshake gets the connect timeout too: a server that accepts and
	// never answers must not hang the command.
	_ = raw.SetDeadline(time.Now().Add(timeout))
	sc, chans, reqs, err := ssh.NewClientConn(raw, target, cfg)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("ssh to %s@%s: %w", conn.user, target, err)
	}
	_ = raw.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

// sshPort is the Mac's SSH port, as the claim's status says.
func sshPort(c *macvirtv1alpha1.MacClaim) int32 {
	if conn := c.Status.Connection; conn != nil && conn.SSHPort != 0 {
		return conn.SSHPort
	}
	return 22
}

// stdinFrom makes in the session's standard input through a pipe of
// kubectl mac's own, returning what starts copying it once the command or
// shell has started. Given as Session.Stdin instead, a remote command that
// ends while input is still coming (a pipe it never reads, `yes |`) closes
// the channel under x/crypto's copy, and Session.Wait then reports that
// write's EOF instead of the exit status: exit 255 at random, after the
// command ran. As OpenSSH does, input the Mac no longer takes is dropped.
func stdinFrom(session *ssh.Session, in io.Reader) (func(), error) {
	w, err := session.StdinPipe()
	if err != nil {
		return nil, err
	}
	return func() {
		go func() {
			if in != nil {
				_, _ = io.Copy(w, in)
			}
			_ = w.Close() // end of input: the Mac's side reads EOF
		}()
	}, nil
}

// interactive runs a login shell, with a terminal when stdin is one; feed
// starts copying stdin to it.
func interactive(session *ssh.Session, env *Env, feed func()) (int, error) {
	if f, ok := env.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		w, h, err := term.GetSize(fd)
		if err != nil {
			w, h = 80, 24
		}
		termType := os.Getenv("TERM")
		if termType == "" {
			termType = "xterm-256color"
		}
		if err := session.RequestPty(termType, h, w, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
			return 255, err
		}
		old, err := term.MakeRaw(fd)
		if err != nil {
			return 255, err
		}
		defer func() { _ = term.Restore(fd, old) }()
	}
	if err := session.Shell(); err != nil {
		return 255, err
	}
	feed()
	return exitCode(session.Wait())
}

// exitCode is the remote command's exit status.
func exitCode(err error) (int, error) {
	var exit *ssh.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), nil
	}
	return 255, err
}

// claimConnection is what the claim's status says about reaching it.
type claimConnection struct {
	claim    *macvirtv1alpha1.MacClaim
	user     string
	hostKeys hostKeys
}

// defaultUser is the account a claim written by an operator from before
// status.connection.user logs in as.
const defaultUser = "admin"

// connection reads the claim: its status.connection has the address, the
// user and the host keys. No Secret is read: a tenant needs rights on
// MacClaims only.
func connection(ctx context.Context, env *Env, name string) (*claimConnection, error) {
	c := &macvirtv1alpha1.MacClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, c); err != nil {
		return nil, err
	}
	conn := c.Status.Connection
	if conn == nil {
		return nil, fmt.Errorf("macclaim %s/%s has no connection yet (phase %s): kubectl mac wait %s", c.Namespace, c.Name, orNone(string(c.Status.Phase)), c.Name)
	}
	keys, err := parseHostKeys(conn.HostKeys)
	if err != nil {
		return nil, fmt.Errorf("macclaim %s/%s: status.connection.hostKeys: %w", c.Namespace, c.Name, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("macclaim %s/%s: its Mac has not reported its host keys yet, so it cannot be checked: kubectl mac wait %s", c.Namespace, c.Name, c.Name)
	}
	user := conn.User
	if user == "" {
		user = defaultUser
	}
	if note := drainNote(c); note != "" {
		_, _ = fmt.Fprintf(env.Err, "kubectl mac: macclaim %s/%s: %s\n", c.Namespace, c.Name, note)
	}
	return &claimConnection{claim: c, user: user, hostKeys: keys}, nil
}

// hostKeys are the host keys a claim's status lists.
type hostKeys []ssh.PublicKey

// parseHostKeys reads the keys of status.connection.hostKeys, one
// "type base64 [comment]" line each, as the guest agent reported them. A
// line with options (cert-authority, say) is refused: the agent reports
// none, and no such key may be taken for a host key.
func parseHostKeys(lines []string) (hostKeys, error) {
	var keys hostKeys
	for i, line := range lines {
		key, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("[%d] %q: %w", i, line, err)
		}
		if len(options) > 0 {
			return nil, fmt.Errorf("[%d] has options (%s): the claim's status lists plain host keys only", i, strings.Join(options, ","))
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return nil, fmt.Errorf("[%d] holds more than one key", i)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// algorithms are the host key algorithms to ask for: those of the listed
// keys (an RSA key signs with rsa-sha2-512 or rsa-sha2-256), so a server
// with other keys too presents one that can be checked.
func (k hostKeys) algorithms() []string {
	var out []string
	for _, key := range k {
		switch t := key.Type(); t {
		case ssh.KeyAlgoRSA:
			out = append(out, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			out = append(out, t)
		}
	}
	return out
}

// check is strict host key checking: the server must present one of the
// keys the claim's status lists, whatever name it was reached by (any node
// of a NodePort, a tunnel).
func (k hostKeys) check(hostname string, _ net.Addr, key ssh.PublicKey) error {
	for _, want := range k {
		if bytes.Equal(want.Marshal(), key.Marshal()) {
			return nil
		}
	}
	var listed []string
	for _, want := range k {
		listed = append(listed, ssh.FingerprintSHA256(want))
	}
	return fmt.Errorf("host key verification failed: %s presented %s key %s, which is not the claim's (%s); refusing to connect",
		hostname, key.Type(), ssh.FingerprintSHA256(key), strings.Join(listed, ", "))
}

// authMethods are ssh-agent's keys, then the identity file (or the default
// identities that exist and need no passphrase).
func authMethods(identity, home string) ([]ssh.AuthMethod, func(), error) {
	var signers []ssh.Signer
	closer := func() {}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" && identity == "" {
		if conn, err := net.Dial("unix", sock); err == nil { //nolint:gosec // the user's own ssh-agent socket, as ssh uses it.
			closer = func() { _ = conn.Close() }
			if s, err := agent.NewClient(conn).Signers(); err == nil {
				signers = append(signers, s...)
			}
		}
	}
	files := []string{identity}
	if identity == "" {
		files = nil
		for _, f := range defaultIdentities {
			files = append(files, filepath.Join(home, ".ssh", f))
		}
	}
	var skipped []string
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // the user's own identity file.
		if errors.Is(err, os.ErrNotExist) && identity == "" {
			continue
		}
		if err != nil {
			closer()
			return nil, nil, fmt.Errorf("reading -i: %w", err)
		}
		s, err := ssh.ParsePrivateKey(b)
		var missing *ssh.PassphraseMissingError
		if errors.As(err, &missing) {
			skipped = append(skipped, f)
			continue
		}
		if err != nil {
			closer()
			return nil, nil, fmt.Errorf("%s is not an SSH private key: %w", f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 {
		closer()
		if len(skipped) > 0 {
			hint := "add it to ssh-agent (ssh-add " + skipped[0] + ") and try again"
			if identity != "" {
				hint = "add it to ssh-agent (ssh-add " + skipped[0] + ") and try again without -i"
			}
			return nil, nil, fmt.Errorf("%s needs a passphrase: %s", strings.Join(skipped, ", "), hint)
		}
		return nil, nil, fmt.Errorf("no SSH key to log in with: none in ssh-agent, none of ~/.ssh/%s; give -i FILE", strings.Join(defaultIdentities, ", ~/.ssh/"))
	}
	return []ssh.AuthMethod{ssh.PublicKeys(signers...)}, closer, nil
}

// vncURL is the claim's Screen Sharing URL: the external address when
// there is one, the Service's name otherwise.
func vncURL(c *macvirtv1alpha1.MacClaim) (string, error) {
	conn := c.Status.Connection
	if conn == nil {
		return "", fmt.Errorf("macclaim %s/%s has no connection yet: kubectl mac wait %s", c.Namespace, c.Name, c.Name)
	}
	if conn.VNCPort == 0 {
		return "", fmt.Errorf("macclaim %s/%s offers no Screen Sharing: its class %s does not set spec.access.screenSharing (ask an admin)",
			c.Namespace, c.Name, c.Spec.ClassName)
	}
	if ext := conn.External; ext != nil && ext.Address != "" && ext.VNCPort != 0 {
		return "vnc://" + net.JoinHostPort(ext.Address, strconv.Itoa(int(ext.VNCPort))), nil
	}
	host := conn.Host
	if host == "" {
		host = conn.Address
	}
	return "vnc://" + net.JoinHostPort(host, strconv.Itoa(int(conn.VNCPort))), nil
}
