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

package tart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// Defaults used when the Driver's fields are zero.
const (
	// DefaultBinary is the tart command looked up in PATH.
	DefaultBinary = "tart"
	// DefaultMaxVMs is how many macOS VMs Apple's licence lets run at once.
	DefaultMaxVMs = 2
	// DefaultStartTimeout bounds how long Start waits for a VM to run.
	DefaultStartTimeout = 2 * time.Minute
	// DefaultPollInterval is how often Start asks tart about the VM: a
	// resumed VM runs within its restore, and a claim waits for the agent
	// to see it (one tart list, tens of milliseconds, only while starting).
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultStartSettle is how long a "tart run" must stay alive after tart
	// lists its VM running before Start trusts the start, when tart made no
	// control socket (macOS 13): tart holds the VM's lock before the
	// framework starts the VM, and exits at once when the framework refuses.
	DefaultStartSettle = 3 * time.Second
)

// socketPoll is how often Start looks for the VM's new control socket.
const socketPoll = 20 * time.Millisecond

// Driver drives the tart command. The zero value is not usable; make one
// with New, then set the fields before the first call.
type Driver struct {
	// Binary is the tart command: a path, or a name looked up in PATH.
	Binary string
	// StateDir holds the driver's own files: each started VM's "tart run"
	// PID (NAME.pid) and output (NAME.log). It must outlive the host agent,
	// so a restarted agent finds the VMs its predecessor started.
	StateDir string
	// Env is added to the host agent's environment for every tart command,
	// e.g. "TART_HOME=/path".
	Env []string
	// MaxVMs is the host's VM limit that Slots reports.
	MaxVMs int
	// StartTimeout bounds how long Start waits for a started VM to run.
	StartTimeout time.Duration
	// PollInterval is how often Start asks tart whether the VM runs.
	PollInterval time.Duration
	// StartSettle is how long a "tart run" must live after its VM is listed
	// running before Start returns, when tart made no new control socket.
	StartSettle time.Duration

	// starting holds the names of the VMs this Driver is starting.
	starting sync.Map
}

var _ vz.Driver = (*Driver)(nil)

// New returns a Driver for the tart command binary ("tart" when empty),
// keeping its files in stateDir.
func New(binary, stateDir string) *Driver {
	if binary == "" {
		binary = DefaultBinary
	}
	return &Driver{
		Binary:       binary,
		StateDir:     stateDir,
		MaxVMs:       DefaultMaxVMs,
		StartTimeout: DefaultStartTimeout,
		PollInterval: DefaultPollInterval,
		StartSettle:  DefaultStartSettle,
	}
}

// Name returns "tart".
func (d *Driver) Name() string { return "tart" }

// exitError is a tart command that exited non-zero.
type exitError struct {
	code   int
	stderr string
}

func (e *exitError) Error() string {
	return fmt.Sprintf("tart exited %d: %s", e.code, e.stderr)
}

// mapped wraps a tart failure with the vz error its exit code and words
// mean, when any: exit 2 is "does not exist", "is not running" or "is
// already running"; exit 1 is everything else, among it the framework's
// VM limit and the deletion of a running VM.
func mapped(err error) error {
	var ee *exitError
	if !errors.As(err, &ee) {
		return err
	}
	s := ee.stderr
	switch {
	case ee.code == 2 && strings.Contains(s, "does not exist"):
		return fmt.Errorf("%w: %s", vz.ErrNotFound, s)
	case ee.code == 2 && strings.Contains(s, "is not running"):
		return fmt.Errorf("%w: %s", vz.ErrNotRunning, s)
	case ee.code == 2 && strings.Contains(s, "is already running"):
		return fmt.Errorf("%w: %s", vz.ErrAlreadyRunning, s)
	case ee.code == 1 && strings.Contains(s, "exceeds the system limit"):
		return fmt.Errorf("%w: %s", vz.ErrVMLimit, s)
	case ee.code == 1 && strings.HasSuffix(strings.TrimSpace(s), " is running"):
		return fmt.Errorf("%w: %s", vz.ErrRunning, s)
	}
	return err
}

func (d *Driver) binary() string {
	if d.Binary == "" {
		return DefaultBinary
	}
	return d.Binary
}

func (d *Driver) env() []string {
	return append(os.Environ(), d.Env...)
}

// tart runs one short tart command and returns its standard output; a
// non-zero exit is an *exitError with the last line of standard error.
func (d *Driver) tart(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.binary(), args...) //nolint:gosec // G204: the binary is the operator's configured tart.
	cmd.Env = d.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return stdout.String(), &exitError{code: ee.ExitCode(), stderr: lastLine(stderr.String())}
	}
	if err != nil {
		return "", fmt.Errorf("running tart %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// lastLine is the last non-empty line of s, trimmed.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

// lastLines is the last n non-empty lines of s, trimmed and joined by
// " | "; "(no output)" when none.
func lastLines(s string, n int) string {
	var out []string
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			out = append([]string{l}, out...)
		}
	}
	if len(out) == 0 {
		return "(no output)"
	}
	return strings.Join(out, " | ")
}

// listEntry is one element of "tart list --format json".
type listEntry struct {
	Source  string `json:"Source"`
	Name    string `json:"Name"`
	Running bool   `json:"Running"`
	State   string `json:"State"`
}

// getInfo is "tart get NAME --format json".
type getInfo struct {
	Running bool   `json:"Running"`
	State   string `json:"State"`
}

func (d *Driver) list(ctx context.Context, source string) ([]listEntry, error) {
	out, err := d.tart(ctx, "list", "--source", source, "--format", "json")
	if err != nil {
		return nil, mapped(err)
	}
	var l []listEntry
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("decoding tart list: %w", err)
	}
	return l, nil
}

// vm builds a vz.VM from tart's view and the driver's own: a VM whose
// "tart run" lives but holds no lock yet is Starting; one tart says is
// "suspended" (not running, its memory saved) is Suspended.
func (d *Driver) vm(ctx context.Context, name string, running bool, state string) vz.VM {
	v := vz.VM{Name: name, State: vz.StateStopped, MAC: d.mac(name)}
	switch {
	case running:
		v.State = vz.StateRunning
		v.IP = d.ip(ctx, name)
	case d.runPID(name) > 0:
		v.State = vz.StateStarting
	case state == "suspended":
		v.State = vz.StateSuspended
	}
	return v
}

// mac reads the VM's MAC address from its config.json, which tart get
// does not show; "" when unreadable.
func (d *Driver) mac(name string) string {
	var c struct {
		MAC string `json:"macAddress"`
	}
	b, err := os.ReadFile(d.vmConfig(name))
	if err != nil || json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.MAC
}

// ip asks tart for a running VM's address without waiting; "" when tart
// has none yet.
func (d *Driver) ip(ctx context.Context, name string) string {
	out, err := d.tart(ctx, "ip", name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// List returns every local VM.
func (d *Driver) List(ctx context.Context) ([]vz.VM, error) {
	l, err := d.list(ctx, "local")
	if err != nil {
		return nil, fmt.Errorf("listing VMs with tart: %w", err)
	}
	out := make([]vz.VM, 0, len(l))
	for _, e := range l {
		out = append(out, d.vm(ctx, e.Name, e.Running, e.State))
	}
	return out, nil
}

// Get returns one VM, or vz.ErrNotFound.
func (d *Driver) Get(ctx context.Context, name string) (vz.VM, error) {
	out, err := d.tart(ctx, "get", name, "--format", "json")
	if err != nil {
		return vz.VM{}, fmt.Errorf("getting VM %s with tart: %w", name, mapped(err))
	}
	var g getInfo
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		return vz.VM{}, fmt.Errorf("decoding tart get %s: %w", name, err)
	}
	return d.vm(ctx, name, g.Running, g.State), nil
}

// Create clones the image into a new VM ("tart clone" pulls it when not
// cached, telling opts.Progress how far), then gives it a serial number of
// its own (every clone of an image has the image's) and sets CPUs and
// memory when asked. tart clone replaces a VM of the same name, so the
// driver checks first.
func (d *Driver) Create(ctx context.Context, name string, opts vz.CreateOptions) error {
	_, err := d.Get(ctx, name)
	switch {
	case err == nil:
		return fmt.Errorf("creating VM %s with tart: %w", name, vz.ErrExists)
	case !errors.Is(err, vz.ErrNotFound):
		return fmt.Errorf("creating VM %s with tart: %w", name, err)
	}
	if opts.PullAlways {
		// tart clone uses a cached tag as it is; tart pull asks the
		// registry for the tag's digest and pulls it when it changed.
		if err := d.pulling(ctx, opts.Progress, "pull", opts.Image); err != nil {
			return fmt.Errorf("pulling image %s with tart for VM %s: %w", opts.Image, name, err)
		}
	}
	if err := d.pulling(ctx, opts.Progress, "clone", opts.Image, name); err != nil {
		return fmt.Errorf("creating VM %s with tart from image %s: %w", name, opts.Image, err)
	}
	args := []string{"set", name, "--random-serial"}
	if opts.CPUs > 0 {
		args = append(args, "--cpu", strconv.Itoa(opts.CPUs))
	}
	if opts.MemoryMiB > 0 {
		args = append(args, "--memory", strconv.Itoa(opts.MemoryMiB))
	}
	if _, err := d.tart(ctx, args...); err != nil {
		return fmt.Errorf("setting the serial number, CPUs and memory of VM %s with tart: %w", name, mapped(err))
	}
	return nil
}

func (d *Driver) pidFile(name string) string { return filepath.Join(d.StateDir, name+".pid") }

func (d *Driver) logFile(name string) string { return filepath.Join(d.StateDir, name+".log") }

// runPID is the recorded "tart run" PID of the VM when that process still
// lives and still runs this VM; 0 otherwise.
func (d *Driver) runPID(name string) int {
	b, err := os.ReadFile(d.pidFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !isTartRun(pid, name) {
		return 0
	}
	return pid
}

// Start runs "tart run NAME --no-graphics" as a detached child in its own
// session, so the VM outlives the host agent, and returns when tart lists
// the VM running and the process stays up (tart made a new control socket,
// or StartSettle passed); when the process exits first, its output says
// why (the framework's VM limit, most often). A Suspended VM is restored,
// and run --suspendable as tart would anyway.
func (d *Driver) Start(ctx context.Context, name string, opts vz.StartOptions) error {
	if _, busy := d.starting.LoadOrStore(name, struct{}{}); busy {
		return fmt.Errorf("starting VM %s with tart: %w: another Start of it is under way", name, vz.ErrAlreadyRunning)
	}
	defer d.starting.Delete(name)
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("starting VM %s with tart: %w", name, err)
	}
	if vm.State == vz.StateRunning {
		return fmt.Errorf("starting VM %s with tart: %w", name, vz.ErrAlreadyRunning)
	}
	if vm.State == vz.StateStarting {
		return fmt.Errorf("starting VM %s with tart: %w: a tart run (PID %d) is starting it",
			name, vz.ErrAlreadyRunning, d.runPID(name))
	}
	if err := os.MkdirAll(d.StateDir, 0o750); err != nil {
		return fmt.Errorf("starting VM %s with tart: %w", name, err)
	}
	sock := d.controlSocket(name)
	sockBefore, _ := os.Stat(sock)

	args := []string{"run", name, "--no-graphics"}
	if opts.ConfigDir != "" {
		// A named share on the automount tag: macOS shows it at
		// /Volumes/My Shared Files/NAME. The name is the directory's last
		// element, as lume names its shares.
		args = append(args, "--dir="+filepath.Base(opts.ConfigDir)+":"+opts.ConfigDir+":ro")
	}
	if opts.Suspendable || vm.State == vz.StateSuspended {
		args = append(args, "--suspendable")
	}
	logf, err := os.OpenFile(d.logFile(name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("starting VM %s with tart: %w", name, err)
	}
	// Not CommandContext: the VM must outlive this call and the agent.
	cmd := exec.Command(d.binary(), args...) //nolint:gosec,noctx // G204: the configured tart; the run outlives ctx on purpose.
	cmd.Env = d.env()
	cmd.Stdout, cmd.Stderr = logf, logf
	detach(cmd)
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return fmt.Errorf("starting VM %s with tart: %w", name, err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(d.pidFile(name), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("starting VM %s with tart: recording PID %d: %w", name, pid, err)
	}
	exited := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	return d.waitRunning(ctx, name, pid, exited, sock, sockBefore)
}

// waitRunning polls tart until the VM runs, the tart run exits, or the
// start timeout passes.
func (d *Driver) waitRunning(ctx context.Context, name string, pid int, exited <-chan int,
	sock string, sockBefore fs.FileInfo) error {
	timeout := orDefault(d.StartTimeout, DefaultStartTimeout)
	interval := orDefault(d.PollInterval, DefaultPollInterval)
	settle := orDefault(d.StartSettle, DefaultStartSettle)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// tart makes the VM's control socket once the VM runs: looking for it
	// costs a stat, so it is looked for far more often than tart is asked,
	// and tart is asked at once when it appears.
	sockTick := time.NewTicker(socketPoll)
	defer sockTick.Stop()
	var runningSince time.Time
	for {
		select {
		case code := <-exited:
			_ = os.Remove(d.pidFile(name))
			return d.runFailure(name, code)
		case <-ctx.Done():
			return fmt.Errorf("waiting for VM %s to run with tart (PID %d goes on): %w", name, pid, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("starting VM %s with tart: it did not run within %s (tart run PID %d goes on; see %s)",
				name, timeout, pid, d.logFile(name))
		case <-tick.C:
		case <-sockTick.C:
			if !newSocket(sock, sockBefore) {
				continue
			}
		}
		l, err := d.list(ctx, "local")
		if err != nil {
			continue
		}
		if !listedRunning(l, name) {
			continue
		}
		if runningSince.IsZero() {
			runningSince = time.Now()
		}
		if newSocket(sock, sockBefore) || time.Since(runningSince) >= settle {
			return nil
		}
	}
}

func listedRunning(l []listEntry, name string) bool {
	for _, e := range l {
		if e.Name == name && e.Running {
			return true
		}
	}
	return false
}

// newSocket tells whether tart made the VM's control socket since before:
// tart makes it once the framework started the VM (macOS 14 and later).
func newSocket(sock string, before fs.FileInfo) bool {
	now, err := os.Stat(sock)
	if err != nil {
		return false
	}
	return before == nil || !os.SameFile(before, now) || !now.ModTime().Equal(before.ModTime())
}

// runFailure maps a "tart run" that exited before its VM ran, from its
// exit code and its output: the last line with words the driver knows, or
// else the last line.
func (d *Driver) runFailure(name string, code int) error {
	b, _ := os.ReadFile(d.logFile(name))
	line := lastLine(string(b))
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if isKnown(code, l) {
			line = l
			break
		}
	}
	err := mapped(&exitError{code: code, stderr: line})
	var ee *exitError
	if errors.As(err, &ee) {
		return fmt.Errorf("starting VM %s with tart: tart run exited %d: %s", name, code, line)
	}
	return fmt.Errorf("starting VM %s with tart: %w", name, err)
}

// isKnown tells whether mapped gives a vz error for this exit and line.
func isKnown(code int, line string) bool {
	var ee *exitError
	return line != "" && !errors.As(mapped(&exitError{code: code, stderr: line}), &ee)
}

func orDefault(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// RequestStop sends SIGUSR2 to the VM's "tart run", tart's only graceful
// path: tart asks the framework to request a stop, and macOS sees the
// power button. It never calls "tart stop", which forces the VM off. The
// PID comes from the state directory, or from the VM's lock when another
// process started it.
func (d *Driver) RequestStop(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("asking VM %s to stop with tart: %w", name, err)
	}
	if vm.State != vz.StateRunning {
		return fmt.Errorf("asking VM %s to stop with tart: %w", name, vz.ErrNotRunning)
	}
	pid := d.runPID(name)
	if pid == 0 {
		pid = lockOwner(d.vmConfig(name))
		if pid > 0 && !isTartRun(pid, name) {
			pid = 0
		}
	}
	if pid == 0 {
		return fmt.Errorf("asking VM %s to stop with tart: %w: no tart run process found for it", name, vz.ErrNoGracefulStop)
	}
	if err := requestStop(pid); err != nil {
		return fmt.Errorf("asking VM %s to stop with tart: signalling tart run PID %d: %w", name, pid, err)
	}
	return nil
}

// ForceStop turns a running VM off: tart stop, which interrupts the run
// and kills it after its timeout.
func (d *Driver) ForceStop(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("forcing VM %s off with tart: %w", name, err)
	}
	if vm.State == vz.StateStopped || vm.State == vz.StateSuspended {
		return fmt.Errorf("forcing VM %s off with tart: %w (%s)", name, vz.ErrNotRunning, vm.State)
	}
	if _, err := d.tart(ctx, "stop", name, "--timeout", "30"); err != nil {
		return fmt.Errorf("forcing VM %s off with tart: %w", name, mapped(err))
	}
	return nil
}

// DiscardSavedState runs "tart stop" on a suspended VM, which removes its
// saved state (Stop.swift's stopSuspended): the next run boots cold.
func (d *Driver) DiscardSavedState(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("discarding the saved state of VM %s with tart: %w", name, err)
	}
	if vm.State != vz.StateSuspended {
		return nil
	}
	if _, err := d.tart(ctx, "stop", name); err != nil {
		return fmt.Errorf("discarding the saved state of VM %s with tart: %w", name, mapped(err))
	}
	return nil
}

// Suspend runs "tart suspend", on which the VM's tart run saves the VM's
// memory to state.vzvmsave and exits, and waits, as long as a start may
// take, until the VM no longer runs. A tart run that could not save (the
// VM was not started --suspendable) ends the VM: the error says so, with
// the run's last words.
func (d *Driver) Suspend(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("suspending VM %s with tart: %w", name, err)
	}
	switch vm.State {
	case vz.StateSuspended:
		return nil
	case vz.StateRunning:
	default:
		return fmt.Errorf("suspending VM %s with tart: %w (%s)", name, vz.ErrNotRunning, vm.State)
	}
	if _, err := d.tart(ctx, "suspend", name); err != nil {
		return fmt.Errorf("suspending VM %s with tart: %w", name, mapped(err))
	}
	return d.waitSuspended(ctx, name)
}

// waitSuspended polls tart until the VM no longer runs, and tells whether
// tart saved it.
func (d *Driver) waitSuspended(ctx context.Context, name string) error {
	timeout := orDefault(d.StartTimeout, DefaultStartTimeout)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(orDefault(d.PollInterval, DefaultPollInterval))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for VM %s to suspend with tart: %w", name, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("suspending VM %s with tart: it still ran after %s (see %s)", name, timeout, d.logFile(name))
		case <-tick.C:
		}
		vm, err := d.Get(ctx, name)
		switch {
		case errors.Is(err, vz.ErrNotFound):
			return fmt.Errorf("suspending VM %s with tart: %w", name, err)
		case err != nil:
			continue
		}
		switch vm.State {
		case vz.StateSuspended:
			return nil
		case vz.StateStopped:
			b, _ := os.ReadFile(d.logFile(name))
			return fmt.Errorf("suspending VM %s with tart: tart ended the VM without saving it: %s",
				name, lastLines(string(b), 3))
		}
	}
}

// CanSuspend is nil: tart suspends on macOS 14 and later, and says so
// itself on older; the host agent checks the host's version.
func (d *Driver) CanSuspend(context.Context) error { return nil }

// Delete removes a stopped or suspended VM ("tart delete"); nil when it
// does not exist, vz.ErrRunning when it runs.
func (d *Driver) Delete(ctx context.Context, name string) error {
	vm, err := d.Get(ctx, name)
	if errors.Is(err, vz.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting VM %s with tart: %w", name, err)
	}
	if vm.State != vz.StateStopped && vm.State != vz.StateSuspended {
		return fmt.Errorf("deleting VM %s with tart: %w (%s)", name, vz.ErrRunning, vm.State)
	}
	if _, err := d.tart(ctx, "delete", name); err != nil {
		err = mapped(err)
		if errors.Is(err, vz.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("deleting VM %s with tart: %w", name, err)
	}
	_ = os.Remove(d.pidFile(name))
	_ = os.Remove(d.logFile(name))
	return nil
}

// Slots reports MaxVMs and how many VMs tart lists running.
func (d *Driver) Slots(ctx context.Context) (vz.Slots, error) {
	l, err := d.list(ctx, "local")
	if err != nil {
		return vz.Slots{}, fmt.Errorf("counting running VMs with tart: %w", err)
	}
	s := vz.Slots{Max: d.MaxVMs}
	if s.Max <= 0 {
		s.Max = DefaultMaxVMs
	}
	for _, e := range l {
		if e.Running {
			s.Running++
		}
	}
	return s, nil
}

// Images lists the OCI images tart has cached, by the names tart lists
// (references by tag, and by digest).
func (d *Driver) Images(ctx context.Context) ([]string, error) {
	l, err := d.list(ctx, "oci")
	if err != nil {
		return nil, fmt.Errorf("listing images with tart: %w", err)
	}
	out := make([]string, 0, len(l))
	for _, e := range l {
		out = append(out, e.Name)
	}
	return out, nil
}

// Pull runs tart pull: it asks the registry for the tag's digest, and
// pulls the image when it changed.
func (d *Driver) Pull(ctx context.Context, image string) error {
	if err := d.pulling(ctx, nil, "pull", image); err != nil {
		return fmt.Errorf("pulling image %s with tart: %w", image, err)
	}
	return nil
}

// ImageDigest reads which digest tart has image's tag linked to: tart
// keeps a pulled image under its digest, OCIs/<host>/<namespace>/sha256:...,
// and the tag as a symbolic link to it (VMStorageOCI.link).
func (d *Driver) ImageDigest(_ context.Context, image string) (string, error) {
	host, namespace, reference := remoteName(image)
	if strings.HasPrefix(reference, "sha256:") {
		return reference, nil
	}
	tag := filepath.Join(d.tartHome(), "cache", "OCIs", strings.ReplaceAll(host, ":", "%3A"), filepath.FromSlash(namespace), reference)
	target, err := os.Readlink(tag)
	if err != nil {
		return "", fmt.Errorf("reading the digest tart has %s under: %w", image, err)
	}
	digest := filepath.Base(target)
	if !strings.HasPrefix(digest, "sha256:") {
		return "", fmt.Errorf("tart has %s linked to %s, not a digest", image, target)
	}
	return digest, nil
}

// remoteName splits an OCI reference as tart's RemoteName does: the
// registry host, the namespace, and a tag (latest when none) or digest.
func remoteName(ref string) (host, namespace, reference string) {
	host, rest, _ := strings.Cut(ref, "/")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return host, rest[:i], rest[i+1:]
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i:], "/") {
		return host, rest[:i], rest[i+1:]
	}
	return host, rest, "latest"
}

// Version is what "tart --version" prints, e.g. "2.32.1".
func (d *Driver) Version(ctx context.Context) (string, error) {
	out, err := d.tart(ctx, "--version")
	if err != nil {
		return "", fmt.Errorf("tart --version: %w", err)
	}
	return strings.TrimSpace(out), nil
}

// tartHome is tart's base directory: TART_HOME from Env or the agent's
// environment, else ~/.tart.
func (d *Driver) tartHome() string {
	for i := len(d.Env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(d.Env[i], "TART_HOME="); ok {
			return v
		}
	}
	if v := os.Getenv("TART_HOME"); v != "" {
		return v
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".tart")
}

func (d *Driver) vmConfig(name string) string {
	return filepath.Join(d.tartHome(), "vms", name, "config.json")
}

func (d *Driver) controlSocket(name string) string {
	return filepath.Join(d.tartHome(), "vms", name, "control.sock")
}
