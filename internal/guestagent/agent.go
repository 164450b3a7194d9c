// Package guestagent is the guest agent's logic, free of anything macOS-specific
// so that it runs and is tested on Linux: it reads the config disk, sends
// heartbeats (internal/guestprotocol v1 and v2) with backoff and jitter, and applies the
// desired state, and runs the tasks the operator hands it (tasks.go). What
// differs per OS (where the disk is mounted, the OS version, addresses,
// writing authorized_keys for a user, users and paths of tasks) is behind
// Platform and TaskPlatform.
package guestagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Version is the agent's version, set at build time.
var Version = "0.1.0"

// Config is what the config disk holds.
type Config struct {
	Endpoint   string
	CABundle   []byte
	ServerName string
	Token      string
	Namespace  string
	Machine    string
	// MachineUID is empty on a config disk written before it was kept.
	MachineUID string
}

// ReadConfig reads the config disk mounted at dir.
func ReadConfig(dir string) (*Config, error) {
	read := func(key string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, key)) //nolint:gosec // files of the agent's own config disk.
		if err != nil {
			return "", fmt.Errorf("reading %s from the config disk: %w", key, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	c := &Config{}
	for key, dst := range map[string]*string{guestprotocol.KeyEndpoint: &c.Endpoint, guestprotocol.KeyToken: &c.Token,
		guestprotocol.KeyNamespace: &c.Namespace, guestprotocol.KeyMachine: &c.Machine} {
		v, err := read(key)
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, fmt.Errorf("%s on the config disk is empty", key)
		}
		*dst = v
	}
	ca, err := read(guestprotocol.KeyCABundle)
	if err != nil {
		return nil, err
	}
	c.CABundle = []byte(ca)
	for key, dst := range map[string]*string{guestprotocol.KeyServerName: &c.ServerName, guestprotocol.KeyMachineUID: &c.MachineUID} {
		if _, err := os.Stat(filepath.Join(dir, key)); err == nil {
			if *dst, err = read(key); err != nil {
				return nil, err
			}
		}
	}
	if !strings.HasPrefix(c.Endpoint, "https://") {
		return nil, fmt.Errorf("endpoint %q on the config disk is not an https:// URL", c.Endpoint)
	}
	return c, nil
}

// Facts are what the agent reports about the guest.
type Facts struct {
	OSVersion, OSBuild, Hostname string
	BootTime                     time.Time
	IPAddresses                  []string
	SSHHostKeys                  []string
	// ApplyError is why the last desired state could not be applied; the
	// run loop sets it, so the operator hears of it with the next heartbeat.
	ApplyError string
}

// Platform is what differs per operating system.
type Platform interface {
	// ConfigDir is where the config disk is mounted ("" while it is not).
	ConfigDir() (string, error)
	// Facts gathers the guest's facts.
	Facts() (Facts, error)
	// AuthorizedKeysPath is the authorized_keys file of a user.
	AuthorizedKeysPath(user string) (string, error)
	// Owner is the uid and gid that files written for user get (sshd
	// refuses keys files other users could have written).
	Owner(user string) (uid, gid int, err error)
	// SetHostname gives the guest the name the operator chose (the
	// machine's), which Facts reports from then on.
	SetHostname(name string) error
}

// TaskPlatform is a Platform that runs tasks (protocol v2). An agent
// whose platform is not one speaks v1 and runs none.
type TaskPlatform interface {
	Platform
	TaskHost
	// TaskDir is where the agent keeps a directory per task; it must
	// survive restarts of the agent and of the guest.
	TaskDir() string
}

// Client speaks the protocol to the operator.
type Client struct {
	cfg  *Config
	http *http.Client
}

// NewClient trusts only the config disk's CA bundle.
func NewClient(cfg *Config) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CABundle) {
		return nil, errors.New("the config disk's CA bundle holds no PEM certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12}}
	return &Client{cfg: cfg, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

// StatusError is a refusal by the operator.
type StatusError struct {
	Code int
	Body guestprotocol.Error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("operator answered %d %s: %s", e.Code, e.Body.Reason, e.Body.Message)
}

// Retryable says whether sending again later may succeed.
func (e *StatusError) Retryable() bool {
	return e.Code == http.StatusTooManyRequests || e.Code >= 500
}

// Heartbeat sends one v1 heartbeat and returns the desired state.
func (c *Client) Heartbeat(ctx context.Context, facts Facts) (*guestprotocol.DesiredState, error) {
	state := &guestprotocol.DesiredState{}
	if err := c.post(ctx, guestprotocol.HeartbeatPath, c.heartbeat(facts), guestprotocol.MaxBodyBytes*8, state); err != nil {
		return nil, err
	}
	return state, nil
}

// HeartbeatV2 sends one v2 heartbeat, with the tasks' reports, and returns
// the desired state and the tasks. An operator from before v2 answers it
// with a StatusError of code 404 (see SpeaksV1).
func (c *Client) HeartbeatV2(ctx context.Context, facts Facts, tasks []guestprotocol.TaskReport) (*guestprotocol.DesiredStateV2, error) {
	state := &guestprotocol.DesiredStateV2{}
	hb := guestprotocol.HeartbeatV2{Heartbeat: c.heartbeat(facts), Tasks: tasks}
	if err := c.post(ctx, guestprotocol.HeartbeatPathV2, hb, guestprotocol.MaxAnswerBytesV2, state); err != nil {
		return nil, err
	}
	return state, nil
}

// SpeaksV1 reports whether err is the answer of an operator that knows no
// v2 heartbeat.
func SpeaksV1(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound && se.Body.Reason == guestprotocol.ReasonUnsupported
}

func (c *Client) heartbeat(facts Facts) guestprotocol.Heartbeat {
	return guestprotocol.Heartbeat{
		Machine:      guestprotocol.MachineRef{Namespace: c.cfg.Namespace, Name: c.cfg.Machine},
		AgentVersion: Version, OSVersion: facts.OSVersion, OSBuild: facts.OSBuild, Hostname: facts.Hostname,
		BootTime: facts.BootTime, IPAddresses: facts.IPAddresses, SSHHostKeys: facts.SSHHostKeys,
		ApplyError: guestprotocol.Truncate(facts.ApplyError, guestprotocol.MaxApplyErrorBytes),
	}
}

// post sends body as JSON to path and decodes an answer of at most limit
// bytes into out.
func (c *Client) post(ctx context.Context, path string, body any, limit int64, out any) error {
	return c.postWith(ctx, c.http, path, body, limit, out)
}

// postWith is post over hc.
func (c *Client) postWith(ctx context.Context, hc *http.Client, path string, body any, limit int64, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.cfg.Endpoint, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Code: resp.StatusCode}
		_ = json.Unmarshal(answer, &se.Body)
		return se
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("decoding the operator's reply: %w", err)
	}
	return nil
}

// WriteAuthorizedKeys replaces path (<home>/.ssh/authorized_keys) with
// keys, owned by uid and gid, atomically: a temporary file in the same
// directory, synced, renamed over the old one, so a reader sees the old file
// or the new one, never half of either.
//
// The agent runs as root and the directory belongs to the guest's user, who
// may have made .ssh (or authorized_keys) a symlink to somewhere only root
// may write, such as the agent's own files. So no symlink is followed: the
// home and .ssh are opened with O_NOFOLLOW and every later step works
// relative to the opened .ssh (openat, fchown, renameat), so swapping .ssh
// after the check changes nothing; .ssh must be a real directory owned by
// the user (or by root, from an older agent, and then given to the user);
// a symlink named authorized_keys is replaced, never written through.
func WriteAuthorizedKeys(path string, keys []string, uid, gid int) error {
	sshDir := filepath.Dir(path)
	home := filepath.Dir(sshDir)
	homeFD, err := unix.Open(home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the home %s (no symlink is followed): %w", home, err)
	}
	defer func() { _ = unix.Close(homeFD) }()
	name := filepath.Base(sshDir)
	if err := unix.Mkdirat(homeFD, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating %s: %w", sshDir, err)
	}
	dirFD, err := unix.Openat(homeFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("refusing %s: it is not a real directory (a symlink is never followed): %w", sshDir, err)
	}
	defer func() { _ = unix.Close(dirFD) }()
	var st unix.Stat_t
	if err := unix.Fstat(dirFD, &st); err != nil {
		return err
	}
	switch int(st.Uid) {
	case uid:
	case 0:
		if err := unix.Fchown(dirFD, uid, gid); err != nil {
			return fmt.Errorf("giving %s to its user: %w", sshDir, err)
		}
	default:
		return fmt.Errorf("refusing %s: it belongs to uid %d, not the user's %d", sshDir, st.Uid, uid)
	}
	if err := unix.Fchmod(dirFD, 0o700); err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("# Managed by macvirt-agent from the MacClaim's sshAuthorizedKeys; changes are overwritten.\n")
	for _, k := range keys {
		buf.WriteString(strings.TrimSpace(k))
		buf.WriteByte('\n')
	}
	tmp := fmt.Sprintf(".authorized_keys-%d-%d", os.Getpid(), time.Now().UnixNano())
	fd, err := unix.Openat(dirFD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating a temporary file in %s: %w", sshDir, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(sshDir, tmp))
	defer func() { _ = unix.Unlinkat(dirFD, tmp, 0) }()
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return err
	}
	for _, step := range []func() error{
		func() error { return unix.Fchown(fd, uid, gid) },
		func() error { return unix.Fchmod(fd, 0o600) },
		f.Sync,
	} {
		if err := step(); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return unix.Renameat(dirFD, tmp, dirFD, filepath.Base(path))
}

// Backoff is the wait before retry n (0-based): exponential from base,
// capped, with up to 50% random jitter so a fleet does not retry in step.
func Backoff(n int, base, maxWait time.Duration) time.Duration {
	d := base
	for i := 0; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1)) //nolint:gosec // jitter needs no cryptographic randomness.
}

// RetryWait is the wait before retrying a failed heartbeat (failures is
// the number of failures before this one): Backoff from one second, capped
// at the heartbeat interval the operator last gave. The operator gives a
// quarter of heartbeatTimeout, so an operator outage of any length costs a
// guest at most one interval of silence once the endpoint answers again,
// never a HeartbeatStale.
func RetryWait(failures int, interval time.Duration) time.Duration {
	return Backoff(failures, time.Second, max(interval, time.Second))
}

// renewIfResumed renews the clock, host keys and token of a guest the host
// resumed (resume.go), on a platform with a task directory.
func renewIfResumed(p Platform, logf func(string, ...any)) (bool, error) {
	tp, ok := p.(TaskPlatform)
	if !ok {
		return false, nil
	}
	dir, err := p.ConfigDir()
	if err != nil || filepath.Base(dir) != guestprotocol.ConfigShareName {
		return false, nil
	}
	gh, _ := p.(GeneralizeHost)
	cs, _ := p.(ClockSetter)
	return RenewAfterResume(cs, gh, filepath.Dir(tp.TaskDir()), dir, logf)
}

// generalizeIfClone generalises the disk when it first boots in another
// machine, on a platform that can (generalize.go).
func generalizeIfClone(p Platform, cfg *Config, logf func(string, ...any)) error {
	tp, ok := p.(TaskPlatform)
	if !ok {
		return nil
	}
	gh, ok := p.(GeneralizeHost)
	if !ok {
		return nil
	}
	_, err := Generalize(gh, tp.TaskDir(), cfg, logf)
	return err
}

// Run heartbeats until ctx ends: it waits for the config disk, then sends a
// heartbeat every interval the operator gives, applying the desired state
// after each; failures are retried after RetryWait.
func Run(ctx context.Context, p Platform, logf func(string, ...any)) error {
	go WatchShutdown(ctx, p, logf)
	woke := make(chan struct{}, 1)
	go WatchResume(ctx, p, woke)
	var client *Client
	var cfg *Config
	failures := 0
	applyErr := ""
	interval := guestprotocol.DefaultHeartbeatInterval
	wait := time.Duration(0)
	tried := time.Now()
	v2 := newSpeaker(p, logf)
	defer v2.Stop()
	for {
		timer := time.NewTimer(time.Until(tried.Add(wait)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-v2.Changed():
		case <-woke:
		case <-v2.Pushed():
			if failures > 0 {
				// Backing off: the push waits for the next try, which
				// takes the new state anyway.
				timer.Stop()
				continue
			}
		}
		timer.Stop()
		var err error
		if renewed, rerr := renewIfResumed(p, logf); rerr != nil {
			err = rerr
		} else if renewed {
			client = nil
		}
		if err == nil && client == nil {
			var dir string
			if dir, err = p.ConfigDir(); err == nil && dir == "" {
				err = errors.New("config disk not mounted yet")
			}
			if err == nil {
				if cfg, err = ReadConfig(dir); err == nil {
					err = generalizeIfClone(p, cfg, logf)
				}
				if err == nil {
					client, err = NewClient(cfg)
				}
			}
		}
		var state *guestprotocol.DesiredState
		var facts Facts
		if err == nil {
			if facts, err = p.Facts(); err == nil {
				facts.ApplyError = applyErr
				state, err = v2.Heartbeat(ctx, client, facts)
			}
		}
		var se *StatusError
		if err != nil {
			if errors.As(err, &se) && !se.Retryable() && se.Code == http.StatusUnauthorized {
				// The token may have been replaced: read the disk again.
				client = nil
			}
			wait, tried = RetryWait(failures, interval), time.Now()
			failures++
			logf("heartbeat failed (retrying in %s): %v", wait.Round(time.Millisecond), err)
			continue
		}
		failures = 0
		interval = time.Duration(max(state.HeartbeatIntervalSeconds, 1)) * time.Second
		wait, tried = interval, time.Now()
		// The operator heard the heartbeat; a guest-side failure to apply
		// its answer is retried at the next one, never by backing off the
		// heartbeats, which would make a healthy guest look silent.
		applyErr = ""
		if err := apply(p, facts, state); err != nil {
			// Told to the operator with the next heartbeat, which shows it
			// on the machine and its claim.
			applyErr = err.Error()
			logf("applying the desired state failed (next try with the heartbeat in %s): %v", wait, err)
		}
		if applyErr != facts.ApplyError {
			// What the operator was told is no longer true: tell it soon,
			// once, rather than a whole interval later.
			wait = min(wait, ReportWait)
		}
	}
}

// apply makes the desired state true on the guest: the SSH keys first (a
// tenant's access must not wait on anything else), then the hostname, when
// it differs from the one the heartbeat reported.
func apply(p Platform, facts Facts, state *guestprotocol.DesiredState) error {
	path, err := p.AuthorizedKeysPath(state.SSHUser)
	if err != nil {
		return err
	}
	uid, gid, err := p.Owner(state.SSHUser)
	if err != nil {
		return err
	}
	if err := WriteAuthorizedKeys(path, state.SSHAuthorizedKeys, uid, gid); err != nil {
		return err
	}
	if h := state.Hostname; h != "" && h != facts.Hostname {
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return fmt.Errorf("refusing the hostname %q the operator sent: %s", h, strings.Join(errs, "; "))
		}
		if err := p.SetHostname(h); err != nil {
			return fmt.Errorf("setting the hostname to %q: %w", h, err)
		}
	}
	return nil
}

// ReportWait is how soon the agent heartbeats again when applying the
// desired state failed, or stopped failing, so the tenant learns of it
// without waiting a whole interval.
var ReportWait = time.Second

// Token is the bearer token the client sends.
func (c *Client) Token() string { return c.cfg.Token }
