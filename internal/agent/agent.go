// Package agent is the guest agent's logic, free of anything macOS-specific
// so that it runs and is tested on Linux: it reads the config disk, sends
// heartbeats (internal/agentapi v1) with backoff and jitter, and applies the
// desired state. What differs per OS (where the disk is mounted, the OS
// version, addresses, writing authorized_keys for a user) is behind Platform.
package agent

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

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/macvirt/macvirt/internal/agentapi"
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
	for key, dst := range map[string]*string{agentapi.KeyEndpoint: &c.Endpoint, agentapi.KeyToken: &c.Token,
		agentapi.KeyNamespace: &c.Namespace, agentapi.KeyMachine: &c.Machine} {
		v, err := read(key)
		if err != nil {
			return nil, err
		}
		if v == "" {
			return nil, fmt.Errorf("%s on the config disk is empty", key)
		}
		*dst = v
	}
	ca, err := read(agentapi.KeyCABundle)
	if err != nil {
		return nil, err
	}
	c.CABundle = []byte(ca)
	if _, err := os.Stat(filepath.Join(dir, agentapi.KeyServerName)); err == nil {
		if c.ServerName, err = read(agentapi.KeyServerName); err != nil {
			return nil, err
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
}

// Platform is what differs per operating system.
type Platform interface {
	// ConfigDir is where the config disk is mounted ("" while it is not).
	ConfigDir() (string, error)
	// Facts gathers the guest's facts.
	Facts() (Facts, error)
	// AuthorizedKeysPath is the authorized_keys file of a user.
	AuthorizedKeysPath(user string) (string, error)
	// Own gives a file written for user to that user (sshd refuses keys
	// files other users could have written).
	Own(path, user string) error
	// SetHostname gives the guest the name the operator chose (the
	// machine's), which Facts reports from then on.
	SetHostname(name string) error
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
	Body agentapi.Error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("operator answered %d %s: %s", e.Code, e.Body.Reason, e.Body.Message)
}

// Retryable says whether sending again later may succeed.
func (e *StatusError) Retryable() bool {
	return e.Code == http.StatusTooManyRequests || e.Code >= 500
}

// Heartbeat sends one heartbeat and returns the desired state.
func (c *Client) Heartbeat(ctx context.Context, facts Facts) (*agentapi.DesiredState, error) {
	body, err := json.Marshal(agentapi.Heartbeat{
		Machine:      agentapi.MachineRef{Namespace: c.cfg.Namespace, Name: c.cfg.Machine},
		AgentVersion: Version, OSVersion: facts.OSVersion, OSBuild: facts.OSBuild, Hostname: facts.Hostname,
		BootTime: facts.BootTime, IPAddresses: facts.IPAddresses, SSHHostKeys: facts.SSHHostKeys,
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.cfg.Endpoint, "/")+agentapi.HeartbeatPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, agentapi.MaxBodyBytes*8))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Code: resp.StatusCode}
		_ = json.Unmarshal(raw, &se.Body)
		return nil, se
	}
	state := &agentapi.DesiredState{}
	if err := json.Unmarshal(raw, state); err != nil {
		return nil, fmt.Errorf("decoding the operator's reply: %w", err)
	}
	return state, nil
}

// WriteAuthorizedKeys replaces path with keys atomically: a temporary file
// in the same directory, synced, renamed over the old one. A reader sees the
// old file or the new one, never half of either.
func WriteAuthorizedKeys(path string, keys []string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".authorized_keys-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	var buf bytes.Buffer
	buf.WriteString("# Managed by macvirt-agent from the MacClaim's sshAuthorizedKeys; changes are overwritten.\n")
	for _, k := range keys {
		buf.WriteString(strings.TrimSpace(k))
		buf.WriteByte('\n')
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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

// Run heartbeats until ctx ends: it waits for the config disk, then sends a
// heartbeat every interval the operator gives, applying the desired state
// after each; failures are retried after RetryWait.
func Run(ctx context.Context, p Platform, logf func(string, ...any)) error {
	var client *Client
	var cfg *Config
	failures := 0
	interval := agentapi.DefaultHeartbeatInterval
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		var err error
		if client == nil {
			var dir string
			if dir, err = p.ConfigDir(); err == nil && dir == "" {
				err = errors.New("config disk not mounted yet")
			}
			if err == nil {
				if cfg, err = ReadConfig(dir); err == nil {
					client, err = NewClient(cfg)
				}
			}
		}
		var state *agentapi.DesiredState
		var facts Facts
		if err == nil {
			if facts, err = p.Facts(); err == nil {
				state, err = client.Heartbeat(ctx, facts)
			}
		}
		var se *StatusError
		if err != nil {
			if errors.As(err, &se) && !se.Retryable() && se.Code == http.StatusUnauthorized {
				// The token may have been replaced: read the disk again.
				client = nil
			}
			wait = RetryWait(failures, interval)
			failures++
			logf("heartbeat failed (retrying in %s): %v", wait.Round(time.Millisecond), err)
			continue
		}
		failures = 0
		interval = time.Duration(max(state.HeartbeatIntervalSeconds, 1)) * time.Second
		wait = interval
		// The operator heard the heartbeat; a guest-side failure to apply
		// its answer is retried at the next one, never by backing off the
		// heartbeats, which would make a healthy guest look silent.
		if err := apply(p, facts, state); err != nil {
			logf("applying the desired state failed (next try with the heartbeat in %s): %v", wait, err)
		}
	}
}

// apply makes the desired state true on the guest: the SSH keys first (a
// tenant's access must not wait on anything else), then the hostname, when
// it differs from the one the heartbeat reported.
func apply(p Platform, facts Facts, state *agentapi.DesiredState) error {
	path, err := p.AuthorizedKeysPath(state.SSHUser)
	if err != nil {
		return err
	}
	if err := WriteAuthorizedKeys(path, state.SSHAuthorizedKeys); err != nil {
		return err
	}
	if err := p.Own(path, state.SSHUser); err != nil {
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

// Token is the bearer token the client sends.
func (c *Client) Token() string { return c.cfg.Token }
