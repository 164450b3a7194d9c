package simulator

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// The simulated guest's sshd (Options.Network). A macOS guest runs sshd with
// the host keys its agent reports, and the agent writes the bound claim's
// keys into the SSH user's authorized_keys. The stand-in does the same: it
// answers on the guest's pod address, port 22, with the host key the guest
// reports, and lets in the user and keys of the operator's last reply, no
// one else. It runs no shell: it answers uname, hostname, sw_vers, whoami,
// true and false from the guest's facts, as a macOS 14.5 (23F79) guest
// would; cat writes (cat > FILE) and reads (cat FILE) one file on the
// guest's disk (relative to the user's home; single-quoted names as
// kubectl mac cp quotes them), as zsh and cat would; and "command not
// found" (exit 127) for anything else.

// guestOS is what a guest's commands say of its macOS.
type guestOS struct {
	version, build, release, kernel, machine string
}

// The simulated guests' systems: macOS 14.5 on an Intel Mac (KubeVirt's
// guests), and macOS 15.5 in a VM on Apple silicon (the fake Macs').
var (
	intelSonoma = guestOS{version: "14.5", build: "23F79", release: "23.5.0", machine: "x86_64",
		kernel: "Darwin Kernel Version 23.5.0: Wed May  1 20:09:52 PDT 2024; root:xnu-10063.121.3~5/RELEASE_X86_64"}
	appleSequoia = guestOS{version: "15.5", build: "24F74", release: "24.5.0", machine: "arm64",
		kernel: "Darwin Kernel Version 24.5.0: Tue Apr 22 19:54:43 PDT 2025; root:xnu-11417.121.6~2/RELEASE_ARM64_VMAPPLE"}
)

// guestSSHD is one guest's stand-in sshd.
type guestSSHD struct {
	os       guestOS
	disk     *GuestDisk
	mu       sync.Mutex
	user     string
	keys     map[string]bool // marshalled public keys
	hostname string
}

// update takes what the operator last sent the guest.
func (d *guestSSHD) update(state guestprotocol.DesiredState, hostname string) {
	keys := map[string]bool{}
	for _, k := range state.SSHAuthorizedKeys {
		if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err == nil {
			keys[string(pub.Marshal())] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.user, d.keys, d.hostname = state.SSHUser, keys, hostname
}

func (d *guestSSHD) allowed(user string, key ssh.PublicKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return user != "" && user == d.user && d.keys[string(key.Marshal())]
}

func (d *guestSSHD) facts() (user, hostname string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.user, d.hostname
}

// guestHostKeyFile is where a simulated guest keeps its SSH host key, as
// macOS's sshd does: made at the first boot of a disk that has none (and
// again after the agent generalised a cloned disk), so it stays the same
// across reboots and differs between disks.
const guestHostKeyFile = "/etc/ssh/ssh_host_ed25519_key"

// guestHostSigner is the host key on the guest's disk, made when missing.
func guestHostSigner(d *GuestDisk) (ssh.Signer, error) {
	path := d.TaskPath(guestHostKeyFile)
	if b, err := os.ReadFile(path); err == nil { //nolint:gosec // the simulated guest's own disk.
		return ssh.ParsePrivateKey(b)
	}
	if err := d.RegenerateHostKeys(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path) //nolint:gosec // the simulated guest's own disk.
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(b)
}

// RegenerateHostKeys makes the host key when it is missing, as ssh-keygen
// -A does.
func (d *GuestDisk) RegenerateHostKeys() error {
	path := d.TaskPath(guestHostKeyFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		return err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return err
	}
	return os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600)
}

// serveSSH listens on a local port registered as podIP:22 on the simulated
// pod network and serves until ctx ends.
func (s *Simulator) serveSSH(ctx context.Context, disk *GuestDisk, podIP string, d *guestSSHD) error {
	cfg, err := sshServerConfig(disk, d)
	if err != nil {
		return err
	}
	return s.listenAt(ctx, podIP, 22, func(conn net.Conn) { serveSSHConn(conn, cfg, d) })
}

// GuestSSH is the stand-in sshd of a guest that is not on the simulated
// pod network: a fake Apple-silicon Mac's VM, which its host agent reaches
// on the Mac's NAT network. It listens on a local port (Addr).
type GuestSSH struct {
	d *guestSSHD
	// Addr is where it listens, host:port on the loopback.
	Addr string
}

// ServeGuestSSH serves a guest's sshd for disk on a local port until ctx
// ends: the host key on the disk, the user and keys of the last Update;
// its commands answer as macOS 15.5 (24F74) in a VM on Apple silicon.
func ServeGuestSSH(ctx context.Context, disk *GuestDisk) (*GuestSSH, error) {
	d := &guestSSHD{disk: disk, os: appleSequoia}
	if _, err := sshServerConfig(disk, d); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			// macOS's launchd starts an sshd per connection, which reads
			// the host keys then: keys made anew (a resumed guest's) count
			// from the next connection.
			cfg, err := sshServerConfig(disk, d)
			if err != nil {
				_ = conn.Close()
				continue
			}
			go serveSSHConn(conn, cfg, d)
		}
	}()
	return &GuestSSH{d: d, Addr: ln.Addr().String()}, nil
}

// Update takes what the operator last sent the guest (its SSH user and
// keys) and the guest's hostname.
func (g *GuestSSH) Update(state guestprotocol.DesiredState, hostname string) {
	g.d.update(state, hostname)
}

// GuestHostKeys are the SSH host keys on a guest's disk, as the agent
// reports them (made at the first boot of a disk that has none).
func GuestHostKeys(d *GuestDisk) []string { return guestHostKeys(d) }

// sshServerConfig is the guest sshd's configuration: the disk's host key,
// and the keys d lets in.
func sshServerConfig(disk *GuestDisk, d *guestSSHD) (*ssh.ServerConfig, error) {
	signer, err := guestHostSigner(disk)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if d.allowed(meta.User(), key) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("permission denied for %q", meta.User())
		},
		ServerVersion: "SSH-2.0-OpenSSH_9.6",
	}
	cfg.AddHostKey(signer)
	return cfg, nil
}

// listenAt makes podIP:port on the pod network answer with serve, one
// call per connection, until ctx ends.
func (s *Simulator) listenAt(ctx context.Context, podIP string, port int, serve func(net.Conn)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	unregister := s.network.register(podIP, port, ln.Addr().String())
	go func() {
		<-ctx.Done()
		unregister()
		_ = ln.Close()
	}()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(conn)
		}
	}()
	return nil
}

// screenSharingBanner is the RFB protocol version macOS's Screen Sharing
// announces first on port 5900.
const screenSharingBanner = "RFB 003.889\n"

// serveScreenSharing answers on the guest's port 5900, as a golden image
// with Screen Sharing turned on does (a class offers it only for such an
// image): the RFB banner, then what the client sends, back (no desktop is
// simulated). Whether a client gets there is its NetworkPolicy's call.
func (s *Simulator) serveScreenSharing(ctx context.Context, podIP string) error {
	return s.listenAt(ctx, podIP, 5900, func(conn net.Conn) {
		defer func() { _ = conn.Close() }()
		if _, err := io.WriteString(conn, screenSharingBanner); err == nil {
			_, _ = io.Copy(conn, conn)
		}
	})
}

func serveSSHConn(conn net.Conn, cfg *ssh.ServerConfig, d *guestSSHD) {
	defer func() { _ = conn.Close() }()
	_, chans, reqs, err := ssh.NewServerConn(conn, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, in, err := nc.Accept()
		if err != nil {
			continue
		}
		go serveSession(ch, in, d)
	}
}

// serveSession answers one session's requests: exec runs one command, shell
// reads commands line by line until exit or end of input.
func serveSession(ch ssh.Channel, in <-chan *ssh.Request, d *guestSSHD) {
	defer func() { _ = ch.Close() }()
	for req := range in {
		switch req.Type {
		case "exec":
			var payload struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			_ = req.Reply(true, nil)
			if code, ok := d.cat(ch, payload.Command); ok {
				exit(ch, code)
				return
			}
			out, code := d.run(payload.Command)
			w := io.Writer(ch)
			if code == 127 {
				w = ch.Stderr()
			}
			_, _ = io.WriteString(w, out)
			exit(ch, code)
			return
		case "shell":
			_ = req.Reply(true, nil)
			exit(ch, d.shell(ch))
			return
		case "pty-req", "env", "window-change":
			_ = req.Reply(true, nil)
		default:
			_ = req.Reply(false, nil)
		}
	}
}

func exit(ch ssh.Channel, code int) {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(code&0xff)) // an exit status, 0 to 255
	_, _ = ch.SendRequest("exit-status", false, b)
}

// shell is an interactive session: a prompt, a command per line.
func (d *guestSSHD) shell(ch ssh.Channel) int {
	user, host := d.facts()
	prompt := fmt.Sprintf("%s@%s ~ %% ", user, strings.SplitN(host, ".", 2)[0])
	_, _ = io.WriteString(ch, prompt)
	lines := bufio.NewScanner(ch)
	for lines.Scan() {
		line := strings.TrimSpace(strings.TrimSuffix(lines.Text(), "\r"))
		if f := strings.Fields(line); len(f) > 0 && f[0] == "exit" {
			code := 0
			if len(f) > 1 {
				code, _ = strconv.Atoi(f[1])
			}
			return code
		}
		if line != "" {
			out, _ := d.run(line)
			_, _ = io.WriteString(ch, strings.ReplaceAll(out, "\n", "\r\n"))
		}
		_, _ = io.WriteString(ch, prompt)
	}
	return 0
}

// run answers a command as the guest's macOS would, from its facts.
func (d *guestSSHD) run(command string) (string, int) {
	user, host := d.facts()
	f := strings.Fields(command)
	if len(f) == 0 {
		return "", 0
	}
	sys := d.os
	if sys.version == "" {
		sys = intelSonoma
	}
	release, kernel := sys.release, sys.kernel
	switch strings.Join(f, " ") {
	case "true":
		return "", 0
	case "false":
		return "", 1
	case "uname", "uname -s":
		return "Darwin\n", 0
	case "uname -a":
		return fmt.Sprintf("Darwin %s %s %s %s\n", host, release, kernel, sys.machine), 0
	case "uname -r":
		return release + "\n", 0
	case "uname -m":
		return sys.machine + "\n", 0
	case "uname -n", "hostname":
		return host + "\n", 0
	case "whoami":
		return user + "\n", 0
	case "sw_vers":
		return fmt.Sprintf("ProductName:\t\tmacOS\nProductVersion:\t\t%s\nBuildVersion:\t\t%s\n", sys.version, sys.build), 0
	}
	if f[0] == "echo" {
		words, err := shellWords(command)
		if err != nil {
			return "zsh:1: unmatched '\n", 1
		}
		return strings.Join(words[1:], " ") + "\n", 0
	}
	return fmt.Sprintf("zsh:1: command not found: %s\n", f[0]), 127
}

// cat runs "cat > FILE" (the channel's input into FILE) and "cat FILE" (FILE
// out), ok false for any other command.
func (d *guestSSHD) cat(ch ssh.Channel, command string) (code int, ok bool) {
	rest, found := strings.CutPrefix(command, "cat ")
	if !found || d.disk == nil {
		return 0, false
	}
	rest = strings.TrimSpace(rest)
	write := strings.HasPrefix(rest, ">")
	if write {
		rest = strings.TrimSpace(strings.TrimPrefix(rest, ">"))
	}
	name, err := shellWord(rest)
	if err != nil || name == "" {
		return 0, false
	}
	user, _ := d.facts()
	path := name
	if !strings.HasPrefix(path, "/") {
		path = "/Users/" + user + "/" + path
	}
	local := d.disk.TaskPath(path)
	_ = os.MkdirAll(d.disk.TaskPath("/Users/"+user), 0o750) // the user's home, as macOS has it
	if write {
		f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644) //nolint:gosec // under the guest's directory.
		if err != nil {
			// zsh words a redirection it cannot open in lower case.
			_, _ = fmt.Fprintf(ch.Stderr(), "zsh:1: %s: %s\n", strings.ToLower(catError(err)), name)
			_, _ = io.Copy(io.Discard, ch)
			return 1, true
		}
		_, cerr := io.Copy(f, ch)
		if err := f.Close(); cerr == nil {
			cerr = err
		}
		if cerr != nil {
			return 1, true
		}
		return 0, true
	}
	f, err := os.Open(local) //nolint:gosec // under the guest's directory.
	if err != nil {
		_, _ = fmt.Fprintf(ch.Stderr(), "cat: %s: %s\n", name, catError(err))
		return 1, true
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		_, _ = fmt.Fprintf(ch.Stderr(), "cat: %s: Is a directory\n", name)
		return 1, true
	}
	if _, err := io.Copy(ch, f); err != nil {
		return 1, true
	}
	return 0, true
}

// catError is how macOS words err.
func catError(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, os.ErrPermission):
		return "Permission denied"
	case strings.Contains(err.Error(), "is a directory"):
		return "Is a directory"
	}
	return err.Error()
}

// shellWord reads one shell word: plain, or quoted pieces, as kubectl mac
// quotes names.
func shellWord(s string) (string, error) {
	words, err := shellWords(s)
	switch {
	case err != nil:
		return "", err
	case len(words) > 1:
		return "", errors.New("more than one word")
	case len(words) == 0:
		return "", nil
	}
	return words[0], nil
}

// shellWords splits a command line as zsh does for the simple commands the
// guest answers: unquoted blanks separate words; single quotes keep all,
// double quotes all but \" and \\, a backslash its next character. No
// expansions.
func shellWords(s string) ([]string, error) {
	var words []string
	var b strings.Builder
	inWord := false
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			end := i + 1
			for ; end < len(s) && s[end] != c; end++ {
				if c == '"' && s[end] == '\\' && end+1 < len(s) && (s[end+1] == '"' || s[end+1] == '\\') {
					end++
				}
			}
			if end >= len(s) {
				return nil, errors.New("unterminated quote")
			}
			piece := s[i+1 : end]
			if c == '"' {
				piece = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(piece)
			}
			b.WriteString(piece)
			inWord = true
			i = end + 1
		case c == '\\' && i+1 < len(s):
			b.WriteByte(s[i+1])
			inWord = true
			i += 2
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
			i++
		default:
			b.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, b.String())
	}
	return words, nil
}
