// Package guestprotocol is the protocol between macvirt's guest agent, inside
// macOS, and the operator, versions 1 and 2 (v2.go, tasks): the one place
// both sides take the paths, limits, JSON bodies and the layout of the
// agent's config disk from. docs/guest-agent.md describes it for people.
package guestprotocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// Version is the protocol version, the first element of every path.
const Version = "v1"

// HeartbeatPath is where the agent POSTs a Heartbeat.
const HeartbeatPath = "/" + Version + "/heartbeat"

// MaxBodyBytes bounds a request body; larger ones are refused unread.
const MaxBodyBytes = 16 << 10

// Limits of the values a heartbeat carries.
const (
	MaxIPAddresses = 32
	// MaxHostKeys and MaxHostKeyBytes bound sshHostKeys.
	MaxHostKeys     = 8
	MaxHostKeyBytes = 2048
	MaxStringBytes  = 256
)

// The config disk: a KubeVirt secret volume with this ISO 9660 volume label
// (macOS mounts it at /Volumes/<label>), holding one file per key.
const (
	ConfigVolumeLabel = "MACVIRTAGENT"
	// KeyEndpoint is the operator's agent endpoint, https://host:port.
	KeyEndpoint = "endpoint"
	// KeyCABundle is the PEM CA bundle the endpoint's certificate chains to.
	KeyCABundle = "ca.crt"
	// KeyToken is the machine's bearer token.
	KeyToken = "token"
	// KeyServerName, optional, is the name the endpoint's certificate is
	// checked against when it is not the endpoint's host (an OLM-issued
	// certificate names the webhook Service, not the agent Service).
	KeyServerName = "server-name"
	// KeyNamespace and KeyMachine name the MacMachine.
	KeyNamespace = "namespace"
	KeyMachine   = "machine"
	// KeyMachineUID, optional (absent on config disks written before it),
	// is the MacMachine's UID: the identity a guest disk is generalised
	// against on its first boot in another machine.
	KeyMachineUID = "machine-uid"
)

// HashToken is the hex SHA-256 of a machine's token: what the operator
// records on the MacMachine (the macvirt.io/agent-token-sha256 annotation)
// and compares a heartbeat's bearer token with, so the token itself stays
// only in the config disk.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// MachineRef names the MacMachine a heartbeat is for.
type MachineRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Heartbeat is what the agent reports, every HeartbeatInterval.
type Heartbeat struct {
	Machine      MachineRef `json:"machine"`
	AgentVersion string     `json:"agentVersion"`
	// OSVersion and OSBuild are macOS's product version and build (14.5, 23F79).
	OSVersion   string    `json:"osVersion"`
	OSBuild     string    `json:"osBuild"`
	Hostname    string    `json:"hostname"`
	BootTime    time.Time `json:"bootTime"`
	IPAddresses []string  `json:"ipAddresses,omitempty"`
	// SSHHostKeys are the guest's SSH host public keys, "<type> <base64>"
	// as in /etc/ssh/ssh_host_*_key.pub without the comment. Tenants get
	// them as known_hosts lines.
	SSHHostKeys []string `json:"sshHostKeys,omitempty"`
	// ApplyError says why the agent could not apply the desired state the
	// operator last sent (the SSH keys, the hostname); empty once it did.
	// At most MaxApplyErrorBytes.
	ApplyError string `json:"applyError,omitempty"`
}

// MaxApplyErrorBytes bounds a heartbeat's applyError; the agent cuts a
// longer message.
const MaxApplyErrorBytes = 1024

// HeartbeatInterval is the interval the operator asks for under a class's
// heartbeatTimeout: a quarter of it, between 5 s and 60 s, so a guest has
// about four chances per timeout.
func HeartbeatInterval(heartbeatTimeout time.Duration) time.Duration {
	return min(max(heartbeatTimeout/4, 5*time.Second), time.Minute)
}

// HeartbeatRecordGap is how old the recorded heartbeat of a guest that
// reports nothing new may grow before a heartbeat is written again, for a
// guest told interval: a little over one interval, so about every other
// heartbeat of a steady guest is written. A guest's silence is judged from
// its recorded heartbeat, and the beats not written were heard less than
// this after it: the machine controller adds the gap to heartbeatTimeout.
func HeartbeatRecordGap(interval time.Duration) time.Duration {
	return interval + interval/4
}

// DefaultHeartbeatInterval is HeartbeatInterval of the default
// heartbeatTimeout (2 minutes): what an agent assumes until the operator
// first answers.
const DefaultHeartbeatInterval = 30 * time.Second

// DefaultSSHUser is the macOS account the claim's keys are written for.
const DefaultSSHUser = "admin"

// DesiredState is the operator's reply: what the agent makes true.
type DesiredState struct {
	// Hostname is the name macOS should have.
	Hostname string `json:"hostname"`
	// SSHUser is the account whose authorized_keys the agent writes.
	SSHUser string `json:"sshUser"`
	// SSHAuthorizedKeys are the bound claim's keys; empty when unbound.
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys"`
	// HeartbeatIntervalSeconds is when to send the next heartbeat.
	HeartbeatIntervalSeconds int `json:"heartbeatIntervalSeconds"`
}

// Error is the body of every 4xx and 5xx reply.
type Error struct {
	// Reason is a stable word a program can switch on.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reasons of Error.
const (
	ReasonUnauthorized     = "Unauthorized"
	ReasonMalformed        = "Malformed"
	ReasonTooLarge         = "TooLarge"
	ReasonRateLimited      = "RateLimited"
	ReasonUnsupported      = "Unsupported"
	ReasonInternal         = "Internal"
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonStaleIdentity: a guest resumed from a saved state reported the
	// SSH host keys it had before it was suspended (its agent does not
	// renew them on resume).
	ReasonStaleIdentity = "StaleIdentity"
)

// DecodeHeartbeat reads one heartbeat strictly: unknown fields, trailing
// data, a body over MaxBodyBytes and values over the limits are errors.
func DecodeHeartbeat(r io.Reader) (*Heartbeat, error) {
	h := &Heartbeat{}
	if err := decodeStrict(r, MaxBodyBytes, h); err != nil {
		return nil, err
	}
	return h, h.Validate()
}

// decodeStrict decodes one JSON object of at most limit bytes into v,
// refusing unknown fields and trailing data.
func decodeStrict(r io.Reader, limit int, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return err
	}
	if len(body) > limit {
		return ErrTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding the heartbeat: %w", err)
	}
	if dec.More() {
		return errors.New("decoding the heartbeat: trailing data after the JSON object")
	}
	return nil
}

// ErrTooLarge is a body over the limit of its version (MaxBodyBytes,
// MaxBodyBytesV2).
var ErrTooLarge = errors.New("the body is larger than the protocol allows")

// Validate checks the required values and the limits.
func (h *Heartbeat) Validate() error {
	var errs []error
	if h.Machine.Namespace == "" || h.Machine.Name == "" {
		errs = append(errs, errors.New("machine.namespace and machine.name are required"))
	}
	for name, v := range map[string]string{"machine.namespace": h.Machine.Namespace, "machine.name": h.Machine.Name,
		"agentVersion": h.AgentVersion, "osVersion": h.OSVersion, "osBuild": h.OSBuild, "hostname": h.Hostname} {
		if len(v) > MaxStringBytes {
			errs = append(errs, fmt.Errorf("%s is longer than %d bytes", name, MaxStringBytes))
		}
	}
	if len(h.ApplyError) > MaxApplyErrorBytes {
		errs = append(errs, fmt.Errorf("applyError is longer than %d bytes", MaxApplyErrorBytes))
	}
	if h.AgentVersion == "" {
		errs = append(errs, errors.New("agentVersion is required"))
	}
	if len(h.IPAddresses) > MaxIPAddresses {
		errs = append(errs, fmt.Errorf("ipAddresses has more than %d entries", MaxIPAddresses))
	}
	for _, ip := range h.IPAddresses {
		if net.ParseIP(ip) == nil {
			errs = append(errs, fmt.Errorf("ipAddresses entry %.64q is not an IP address", ip))
		}
	}
	errs = append(errs, h.ValidHostKeys())
	return errors.Join(errs...)
}

// ValidHostKeys checks sshHostKeys: at most MaxHostKeys, each exactly
// "<type> <base64>" of a public key SSH parses.
func (h *Heartbeat) ValidHostKeys() error {
	var errs []error
	if len(h.SSHHostKeys) > MaxHostKeys {
		errs = append(errs, fmt.Errorf("sshHostKeys has more than %d entries", MaxHostKeys))
	}
	for _, k := range h.SSHHostKeys {
		if err := validHostKey(k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validHostKey(k string) error {
	if len(k) > MaxHostKeyBytes {
		return fmt.Errorf("sshHostKeys entry is longer than %d bytes", MaxHostKeyBytes)
	}
	fields := strings.Fields(k)
	if len(fields) != 2 || fields[0]+" "+fields[1] != k {
		return fmt.Errorf("sshHostKeys entry %.64q is not \"<type> <base64>\"", k)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k))
	if err != nil || pub.Type() != fields[0] {
		return fmt.Errorf("sshHostKeys entry %.64q is not an SSH public key", k)
	}
	return nil
}

// Truncate cuts s to at most n bytes, on a rune boundary: how both sides
// bound a message.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
