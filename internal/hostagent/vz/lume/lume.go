/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package lume

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// DefaultBaseURL is where "lume serve" listens unless told otherwise: it
// binds 127.0.0.1 only, port 7777.
const DefaultBaseURL = "http://127.0.0.1:7777"

// Defaults for the start wait, used when the Driver's fields are zero.
const (
	// DefaultStartTimeout bounds how long Start waits for a VM to run.
	DefaultStartTimeout = 2 * time.Minute
	// DefaultPollInterval is how often Start asks lume about the VM.
	DefaultPollInterval = time.Second
)

// defaultRegistry and defaultOrganization are what lume assumes for a pull
// without them; the driver sends them explicitly.
const (
	defaultRegistry     = "ghcr.io"
	defaultOrganization = "trycua"
	defaultTag          = "latest"
)

// limitTexts are the words the Virtualization framework's VM-limit error
// (VZErrorDomain code 6) is known by; lume logs the error's description.
var limitTexts = []string{
	"exceeds the system limit",
	"exceeds the limit",
	"maximum supported number of active virtual machines",
	"VZErrorDomain Code=6",
	"virtualMachineLimitExceeded",
}

// Driver drives lume's local HTTP API. The zero value is not usable; make
// one with New, then set the fields before the first call.
type Driver struct {
	// BaseURL is lume's address, without the /lume path.
	BaseURL string
	// Client makes the HTTP calls; nil uses a client with a 30-minute
	// timeout. A pull is asynchronous and polled, so no call lasts long.
	Client *http.Client
	// StartTimeout bounds how long Start waits for a started VM to run.
	StartTimeout time.Duration
	// PollInterval is how often Start asks lume whether the VM runs, and
	// Create how its pull goes.
	PollInterval time.Duration
	// Binary is lume's command, for what only it does: its version, and
	// "lume shutdown", which asks macOS to shut down from inside, over SSH as
	// GuestUser with GuestPassword (the image's administrator, whom sudo
	// lets run shutdown -h now). Empty Binary or GuestUser: the driver
	// cannot ask (RequestStop says ErrNoGracefulStop), and the guest
	// agent's share is the only way.
	Binary                   string
	GuestUser, GuestPassword string
	// StateDir keeps the driver's record of which image reference each of
	// lume's cached images was pulled as (lume lists a cached image by its
	// name and manifest id only, never its tag); empty keeps none, and no
	// class image is ever seen cached.
	StateDir string

	// pulledMu guards the record's file.
	pulledMu sync.Mutex
}

var _ vz.Driver = (*Driver)(nil)

// New returns a Driver for lume at baseURL (DefaultBaseURL when empty).
func New(baseURL string) *Driver {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	return &Driver{
		BaseURL:      baseURL,
		Client:       &http.Client{Timeout: 30 * time.Minute},
		StartTimeout: DefaultStartTimeout,
		PollInterval: DefaultPollInterval,
	}
}

// Name returns "lume".
func (d *Driver) Name() string { return "lume" }

// vmDetails is the part of lume's VMDetails JSON the driver reads.
type vmDetails struct {
	Name      string  `json:"name"`
	Status    string  `json:"status"`
	IPAddress *string `json:"ipAddress"`
	// DownloadProgress is a pull's percentage, while Status is "pulling".
	DownloadProgress float64 `json:"downloadProgress"`
}

// hostStatus is lume's GET /lume/host/status answer.
type hostStatus struct {
	Status         string `json:"status"`
	VMCount        int    `json:"vm_count"`
	MaxVMs         int    `json:"max_vms"`
	AvailableSlots int    `json:"available_slots"`
}

// apiError is lume's error body.
type apiError struct {
	Message string `json:"message"`
}

// httpError is a non-2xx answer from lume.
type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("lume answered %d: %s", e.status, e.message)
}

// mapped wraps a lume error with the vz error its words mean, when any.
func mapped(err error) error {
	var he *httpError
	if !errors.As(err, &he) || he.status != http.StatusBadRequest {
		return err
	}
	msg := he.message
	switch {
	case strings.Contains(msg, "Virtual machine not found"):
		return fmt.Errorf("%w: %s", vz.ErrNotFound, msg)
	case strings.HasPrefix(msg, pullFailed):
		// lume answers so about a VM whose pull failed, until it is
		// pulled again: no VM exists.
		return fmt.Errorf("%w: %s", vz.ErrNotFound, msg)
	case strings.Contains(msg, "already exists"):
		return fmt.Errorf("%w: %s", vz.ErrExists, msg)
	case strings.Contains(msg, "Virtual machine already running"):
		return fmt.Errorf("%w: %s", vz.ErrAlreadyRunning, msg)
	case strings.Contains(msg, "Virtual machine not running"):
		return fmt.Errorf("%w: %s", vz.ErrNotRunning, msg)
	case isLimitText(msg):
		return fmt.Errorf("%w: %s", vz.ErrVMLimit, msg)
	}
	return err
}

func isLimitText(s string) bool {
	for _, t := range limitTexts {
		if strings.Contains(strings.ToLower(s), strings.ToLower(t)) {
			return true
		}
	}
	return false
}

func (d *Driver) client() *http.Client {
	if d.Client != nil {
		return d.Client
	}
	return &http.Client{Timeout: 30 * time.Minute}
}

// vmPath is the path of one VM. lume matches routes on the raw request
// target, query string included, so the driver never sends a query string.
func vmPath(name string) string {
	return "/lume/vms/" + url.PathEscape(name)
}

// call sends one request and decodes a 2xx JSON answer into out (when not
// nil); a non-2xx answer is an *httpError with lume's message.
func (d *Driver) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding the request to %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(d.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("making the request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client().Do(req)
	if err != nil {
		return fmt.Errorf("calling lume %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading lume's answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var ae apiError
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &ae) == nil && ae.Message != "" {
			msg = ae.Message
		}
		return &httpError{status: resp.StatusCode, message: msg}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding lume's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// toVM turns lume's VMDetails into a vz.VM. "provisioning" and "pulling"
// are Starting (lume is busy with the VM); "provisioning (stale)" and every
// other word are Stopped.
func toVM(v vmDetails) vz.VM {
	// Only "stopped" is stopped: any other state ("provisioning",
	// "pulling", "pending", one lume adds later) is lume at work on the
	// VM, which neither a start nor a delete may cross.
	out := vz.VM{Name: v.Name, State: vz.StateStarting}
	switch v.Status {
	case "stopped":
		out.State = vz.StateStopped
	case "running":
		out.State = vz.StateRunning
		if v.IPAddress != nil {
			out.IP = *v.IPAddress
		}
	}
	return out
}

// List returns every VM lume knows, in lume's order (by name).
func (d *Driver) List(ctx context.Context) ([]vz.VM, error) {
	var vms []vmDetails
	if err := d.call(ctx, http.MethodGet, "/lume/vms", nil, &vms); err != nil {
		return nil, fmt.Errorf("listing VMs with lume: %w", mapped(err))
	}
	out := make([]vz.VM, 0, len(vms))
	for _, v := range vms {
		out = append(out, toVM(v))
	}
	return out, nil
}

// Get returns one VM, or vz.ErrNotFound.
func (d *Driver) Get(ctx context.Context, name string) (vz.VM, error) {
	var v vmDetails
	if err := d.call(ctx, http.MethodGet, vmPath(name), nil, &v); err != nil {
		return vz.VM{}, fmt.Errorf("getting VM %s with lume: %w", name, mapped(err))
	}
	if v.Name == "" {
		v.Name = name
	}
	return toVM(v), nil
}

// pullFailed starts lume's answer about a VM whose asynchronous pull
// failed.
const pullFailed = "Pull failed for "

// waitPulled waits for lume's pull of the VM name to end, telling
// progress of each new percentage.
func (d *Driver) waitPulled(ctx context.Context, name string, progress func(vz.PullProgress)) error {
	last := -1
	for {
		var v vmDetails
		err := d.call(ctx, http.MethodGet, vmPath(name), nil, &v)
		var he *httpError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &he) && strings.Contains(he.message, pullFailed):
			return errors.New(he.message)
		case err != nil:
			return mapped(err)
		case v.Status != "pulling":
			return nil
		}
		if pct := int(v.DownloadProgress); pct != last && progress != nil {
			last = pct
			progress(vz.PullProgress{Percent: min(max(pct, 0), 100)})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d.pollInterval()):
		}
	}
}

// pullRequest is lume's POST /lume/pull body.
type pullRequest struct {
	Image        string `json:"image"`
	Name         string `json:"name"`
	Registry     string `json:"registry"`
	Organization string `json:"organization"`
}

// SplitImage splits an OCI reference into what lume's pull wants:
// registry, organization and "image:tag". "ghcr.io/trycua/macos:latest"
// gives "ghcr.io", "trycua", "macos:latest"; a reference without a
// registry host gets ghcr.io, one without a tag gets "latest". lume cannot
// pull by digest, nor a reference without an organization.
func SplitImage(ref string) (registry, organization, image string, err error) {
	if strings.Contains(ref, "@") {
		return "", "", "", fmt.Errorf("image %q: lume pulls by tag only, not by digest", ref)
	}
	parts := strings.Split(ref, "/")
	registry = defaultRegistry
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		registry = parts[0]
		parts = parts[1:]
	}
	if len(parts) < 2 {
		return "", "", "", fmt.Errorf("image %q: lume needs registry/organization/image:tag", ref)
	}
	organization = strings.Join(parts[:len(parts)-1], "/")
	image = parts[len(parts)-1]
	if !strings.Contains(image, ":") {
		image += ":" + defaultTag
	}
	if image == "" || organization == "" || strings.Count(image, ":") != 1 || strings.HasPrefix(image, ":") {
		return "", "", "", fmt.Errorf("image %q: lume needs registry/organization/image:tag", ref)
	}
	return registry, organization, image, nil
}

// patchRequest is lume's PATCH /lume/vms/:name body.
type patchRequest struct {
	CPU    *int   `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// Create pulls the image into a new VM, then sets CPUs and memory when
// asked. The pull is lume's asynchronous one (POST /lume/pull/start, 202):
// while it runs, lume answers GET /lume/vms/NAME with status "pulling" and
// its downloadProgress (0 to 100), which goes to opts.Progress, and once
// it failed, with 400 "Pull failed for 'NAME': ...". lume cannot cancel a
// pull: a cancelled ctx returns at once, and lume goes on until the VM
// exists (the VM is Starting until then).
func (d *Driver) Create(ctx context.Context, name string, opts vz.CreateOptions) error {
	registry, org, image, err := SplitImage(opts.Image)
	if err != nil {
		return fmt.Errorf("creating VM %s with lume: %w", name, err)
	}
	if _, err := d.Get(ctx, name); err == nil {
		return fmt.Errorf("creating VM %s with lume: %w", name, vz.ErrExists)
	} else if !errors.Is(err, vz.ErrNotFound) {
		return fmt.Errorf("creating VM %s with lume: %w", name, err)
	}
	req := pullRequest{Image: image, Name: name, Registry: registry, Organization: org}
	if err := d.call(ctx, http.MethodPost, "/lume/pull/start", req, nil); err != nil {
		// lume's pull errors rarely name the image; the wrap does.
		return fmt.Errorf("creating VM %s with lume from image %s: %w", name, opts.Image, mapped(err))
	}
	if err := d.waitPulled(ctx, name, opts.Progress); err != nil {
		return fmt.Errorf("creating VM %s with lume from image %s: %w", name, opts.Image, err)
	}
	d.recordPull(ctx, opts.Image, org, image)
	if opts.CPUs == 0 && opts.MemoryMiB == 0 {
		return nil
	}
	var p patchRequest
	if opts.CPUs > 0 {
		cpus := opts.CPUs
		p.CPU = &cpus
	}
	if opts.MemoryMiB > 0 {
		p.Memory = fmt.Sprintf("%dMB", opts.MemoryMiB)
	}
	if err := d.call(ctx, http.MethodPatch, vmPath(name), p, nil); err != nil {
		return fmt.Errorf("setting CPUs and memory of VM %s with lume: %w", name, mapped(err))
	}
	return nil
}

// sharedDir is one entry of lume's run request's sharedDirectories.
type sharedDir struct {
	HostPath string `json:"hostPath"`
	ReadOnly bool   `json:"readOnly"`
}

// runRequest is lume's POST /lume/vms/:name/run body.
type runRequest struct {
	NoDisplay         bool        `json:"noDisplay"`
	SharedDirectories []sharedDir `json:"sharedDirectories,omitempty"`
}

// Start starts a stopped VM and waits until lume reports it running. lume
// answers every run request with 202 and reports a failed start only in
// its log, so the driver checks first, then polls the VM, and reads the
// host status and lume's log (GET /lume/logs, when lume runs as a daemon
// with log files) to tell the framework's VM limit from other failures.
// opts.Suspendable is ignored: lume cannot suspend.
func (d *Driver) Start(ctx context.Context, name string, opts vz.StartOptions) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("starting VM %s with lume: %w", name, err)
	}
	switch vm.State {
	case vz.StateRunning:
		return fmt.Errorf("starting VM %s with lume: %w", name, vz.ErrAlreadyRunning)
	case vz.StateStarting:
		return fmt.Errorf("starting VM %s with lume: %w: lume is provisioning it", name, vz.ErrAlreadyRunning)
	}
	if hs, err := d.hostStatus(ctx); err == nil && hs.MaxVMs > 0 && hs.AvailableSlots <= 0 {
		return fmt.Errorf("starting VM %s with lume: %w: lume reports %d of %d VMs running",
			name, vz.ErrVMLimit, hs.VMCount, hs.MaxVMs)
	}
	before := d.logs(ctx)
	req := runRequest{NoDisplay: true}
	if opts.ConfigDir != "" {
		req.SharedDirectories = []sharedDir{{HostPath: opts.ConfigDir, ReadOnly: true}}
	}
	if err := d.call(ctx, http.MethodPost, vmPath(name)+"/run", req, nil); err != nil {
		return fmt.Errorf("starting VM %s with lume: %w", name, mapped(err))
	}
	return d.waitRunning(ctx, name, before)
}

func (d *Driver) pollInterval() time.Duration {
	if d.PollInterval <= 0 {
		return DefaultPollInterval
	}
	return d.PollInterval
}

// waitRunning polls the VM until it runs, lume's log tells the start
// failed, or the start timeout passes.
func (d *Driver) waitRunning(ctx context.Context, name string, before *logSnapshot) error {
	timeout := d.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	interval := d.pollInterval()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		vm, err := d.Get(ctx, name)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for VM %s to run: %w", name, err)
		case vm.State == vz.StateRunning:
			return nil
		}
		if err := d.startFailure(ctx, name, before); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for VM %s to run with lume: %w", name, ctx.Err())
		case <-deadline.C:
			return d.timedOut(ctx, name, timeout, before)
		case <-tick.C:
		}
	}
}

// timedOut decides what a start that never ran means: the VM limit when
// lume's host status shows no free slot or its log shows the limit text.
func (d *Driver) timedOut(ctx context.Context, name string, timeout time.Duration, before *logSnapshot) error {
	if vm, err := d.Get(ctx, name); err == nil && vm.State == vz.StateRunning {
		return nil
	}
	if err := d.startFailure(ctx, name, before); err != nil {
		return err
	}
	hs, err := d.hostStatus(ctx)
	if err == nil && hs.MaxVMs > 0 && hs.AvailableSlots <= 0 {
		return fmt.Errorf("starting VM %s with lume: %w: it did not run within %s and lume reports %d of %d VMs running",
			name, vz.ErrVMLimit, timeout, hs.VMCount, hs.MaxVMs)
	}
	return fmt.Errorf("starting VM %s with lume: it did not run within %s and lume's log names no cause", name, timeout)
}

// startFailure reads lume's log written since before and returns the
// start's failure for the VM, if the log shows one.
func (d *Driver) startFailure(ctx context.Context, name string, before *logSnapshot) error {
	if before == nil {
		return nil
	}
	now := d.logs(ctx)
	if now == nil {
		return nil
	}
	for _, line := range now.since(before) {
		if !strings.Contains(line, "ERROR") || !mentionsVM(line, name) {
			continue
		}
		switch {
		case isLimitText(line):
			return fmt.Errorf("starting VM %s with lume: %w: %s", name, vz.ErrVMLimit, line)
		case strings.Contains(line, "Virtual machine already running"):
			return fmt.Errorf("starting VM %s with lume: %w: %s", name, vz.ErrAlreadyRunning, line)
		case strings.Contains(line, "Failed to start VM"):
			return fmt.Errorf("starting VM %s with lume: %s", name, line)
		}
	}
	return nil
}

// mentionsVM tells whether a lume log line's metadata names the VM: lume
// writes metadata as key=value pairs separated by spaces.
func mentionsVM(line, name string) bool {
	needle := "name=" + name
	for i := 0; ; {
		j := strings.Index(line[i:], needle)
		if j < 0 {
			return false
		}
		end := i + j + len(needle)
		startOK := i+j == 0 || line[i+j-1] == ' '
		if startOK && (end == len(line) || line[end] == ' ') {
			return true
		}
		i = end
	}
}

// logSnapshot is lume's two log files as GET /lume/logs returned them.
type logSnapshot struct {
	Info  string `json:"info"`
	Error string `json:"error"`
}

// since returns the lines added to either log after before; when a log
// shrank (rotated), all of it.
func (s *logSnapshot) since(before *logSnapshot) []string {
	var out []string
	for _, p := range [][2]string{{before.Info, s.Info}, {before.Error, s.Error}} {
		old, cur := p[0], p[1]
		added := cur
		if strings.HasPrefix(cur, old) {
			added = cur[len(old):]
		}
		for _, l := range strings.Split(added, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// logs fetches lume's logs; nil when lume has none to give (it was not
// started as a daemon with log files, or the route is missing). The route
// takes no query string: lume would not match it with one.
func (d *Driver) logs(ctx context.Context) *logSnapshot {
	var s logSnapshot
	if err := d.call(ctx, http.MethodGet, "/lume/logs", nil, &s); err != nil {
		return nil
	}
	return &s
}

func (d *Driver) hostStatus(ctx context.Context) (hostStatus, error) {
	var hs hostStatus
	if err := d.call(ctx, http.MethodGet, "/lume/host/status", nil, &hs); err != nil {
		return hostStatus{}, fmt.Errorf("reading lume's host status: %w", mapped(err))
	}
	return hs, nil
}

// RequestStop asks macOS to shut down with "lume shutdown", which logs
// into the guest over SSH and runs shutdown -h now, when the driver has
// the guest's administrator; vz.ErrNoGracefulStop otherwise. lume's stop
// is forced (the framework's stop, or SIGINT then SIGKILL to the VM's
// process), so the driver never uses it to ask.
func (d *Driver) RequestStop(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("asking VM %s to stop with lume: %w", name, err)
	}
	if vm.State != vz.StateRunning {
		return fmt.Errorf("asking VM %s to stop with lume: %w (lume says %s)", name, vz.ErrNotRunning, vm.State)
	}
	if d.Binary == "" || d.GuestUser == "" {
		return fmt.Errorf("asking VM %s to stop with lume: %w: lume's stop is forced, and lume shutdown needs the guest's "+
			"administrator (the agent's --lume-guest-user and --lume-guest-password-file)", name, vz.ErrNoGracefulStop)
	}
	// lume takes the password on its command line only.
	cmd := exec.CommandContext(ctx, d.Binary, "shutdown", name, "--user", d.GuestUser, "--password", d.GuestPassword, "--timeout", "30") //nolint:gosec // G204: the operator's configured lume.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "Error: "))
		if strings.Contains(msg, "is not running") {
			return fmt.Errorf("asking VM %s to shut down with lume shutdown: %w: %s", name, vz.ErrNotRunning, msg)
		}
		return fmt.Errorf("asking VM %s to shut down with lume shutdown (over SSH as %s): %w: %s", name, d.GuestUser, err, msg)
	}
	return nil
}

// ForceStop turns a running VM off with lume's stop, which is forced.
func (d *Driver) ForceStop(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("forcing VM %s off with lume: %w", name, err)
	}
	if vm.State == vz.StateStopped {
		return fmt.Errorf("forcing VM %s off with lume: %w", name, vz.ErrNotRunning)
	}
	if err := d.call(ctx, http.MethodPost, vmPath(name)+"/stop", nil, nil); err != nil {
		return fmt.Errorf("forcing VM %s off with lume: %w", name, mapped(err))
	}
	return nil
}

// Delete removes a stopped VM; nil when lume has no such VM, vz.ErrRunning
// when it runs or lume is starting it.
func (d *Driver) Delete(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if errors.Is(err, vz.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting VM %s with lume: %w", name, err)
	}
	if vm.State != vz.StateStopped {
		return fmt.Errorf("deleting VM %s with lume: %w (lume says %s)", name, vz.ErrRunning, vm.State)
	}
	if err := d.call(ctx, http.MethodDelete, vmPath(name), nil, nil); err != nil {
		err = mapped(err)
		if errors.Is(err, vz.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("deleting VM %s with lume: %w", name, err)
	}
	return nil
}

// Slots reads lume's host status: max_vms (lume fixes it at 2) and how
// many VMs lume sees running.
func (d *Driver) Slots(ctx context.Context) (vz.Slots, error) {
	hs, err := d.hostStatus(ctx)
	if err != nil {
		return vz.Slots{}, err
	}
	return vz.Slots{Max: hs.MaxVMs, Running: hs.VMCount}, nil
}

// cachedImage is one entry of GET /lume/images.
type cachedImage struct {
	Repository string `json:"repository"`
	ImageID    string `json:"imageId"`
}

// Images lists lume's image cache as "repository:imageId", where
// repository is the image's name without registry, organization and tag,
// and imageId is the first 12 characters of lume's manifest id (not a
// tag); and, for each such image the driver pulled, the reference it
// pulled it as, so a class's image can be found cached. lume lists only
// its default organization (trycua): the route takes the organization
// from a query string, which lume's route matching does not accept.
func (d *Driver) Images(ctx context.Context) ([]string, error) {
	imgs, err := d.images(ctx)
	if err != nil {
		return nil, err
	}
	pulled := d.pulled()
	out := make([]string, 0, len(imgs))
	for _, i := range imgs {
		out = append(out, i.Repository+":"+i.ImageID)
	}
	for ref, id := range pulled {
		if _, _, image, err := SplitImage(ref); err == nil && slices.Contains(out, repository(image)+":"+id) {
			out = append(out, ref)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (d *Driver) images(ctx context.Context) ([]cachedImage, error) {
	var imgs []cachedImage
	if err := d.call(ctx, http.MethodGet, "/lume/images", nil, &imgs); err != nil {
		return nil, fmt.Errorf("listing images with lume: %w", mapped(err))
	}
	return imgs, nil
}

// repository is an "image:tag" without its tag, as lume names a cached
// image.
func repository(image string) string {
	r, _, _ := strings.Cut(image, ":")
	return r
}

// pulledFile, under StateDir, maps each reference the driver pulled to
// the imageId lume listed for it after the pull.
const pulledFile = "pulled.json"

func (d *Driver) pulled() map[string]string {
	out := map[string]string{}
	if d.StateDir == "" {
		return out
	}
	d.pulledMu.Lock()
	defer d.pulledMu.Unlock()
	b, err := os.ReadFile(filepath.Join(d.StateDir, pulledFile))
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// recordPull notes which of lume's cached images the pull of ref made or
// used: lume keeps one version per image name (it removes the others on
// each pull), so the name's one entry after the pull is the reference's.
// Best effort: a record missed only loses the cached-image preference.
func (d *Driver) recordPull(ctx context.Context, ref, org, image string) {
	if d.StateDir == "" || org != defaultOrganization {
		return
	}
	imgs, err := d.images(ctx)
	if err != nil {
		return
	}
	id := ""
	for _, i := range imgs {
		if i.Repository == repository(image) {
			id = i.ImageID
		}
	}
	if id == "" {
		return
	}
	pulled := d.pulled()
	pulled[ref] = id
	b, err := json.Marshal(pulled)
	if err != nil {
		return
	}
	d.pulledMu.Lock()
	defer d.pulledMu.Unlock()
	if err := os.MkdirAll(d.StateDir, 0o700); err != nil {
		return
	}
	tmp := filepath.Join(d.StateDir, pulledFile+".tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(d.StateDir, pulledFile))
	}
}

// Version is unsupported: lume's API has no version route ("lume
// --version" on the Mac prints it; the doctor runs that).
func (d *Driver) Version(ctx context.Context) (string, error) {
	if d.Binary == "" {
		return "", fmt.Errorf("lume's API does not say its version, and the driver has no lume command to ask: %w", errors.ErrUnsupported)
	}
	out, err := exec.CommandContext(ctx, d.Binary, "--version").Output() //nolint:gosec // G204: the operator's configured lume.
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", d.Binary, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Pull is unsupported: lume keeps a cached image under its manifest id
// and says nothing of a tag's digest, so a re-pushed tag cannot be told.
func (d *Driver) Pull(context.Context, string) error {
	return fmt.Errorf("lume cannot tell a re-pushed tag from the one it cached: %w", errors.ErrUnsupported)
}

// ImageDigest is unsupported: lume lists a cached image by 12 characters
// of its manifest id, not its digest.
func (d *Driver) ImageDigest(context.Context, string) (string, error) {
	return "", fmt.Errorf("lume does not say an image's digest: %w", errors.ErrUnsupported)
}

// errNoSuspend is why lume cannot suspend a VM.
var errNoSuspend = fmt.Errorf("lume cannot suspend a VM (no saved-state support in lume 0.5.3): %w", errors.ErrUnsupported)

// Suspend is unsupported: lume has no saved-state support.
func (d *Driver) Suspend(_ context.Context, name string) error {
	return fmt.Errorf("suspending VM %s: %w", name, errNoSuspend)
}

// CanSuspend says lume cannot suspend, whatever the host.
func (d *Driver) CanSuspend(context.Context) error { return errNoSuspend }

// DiscardSavedState does nothing: lume saves no state, so it has none to drop.
func (d *Driver) DiscardSavedState(context.Context, string) error { return nil }
