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

package tart_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/hostagent/vz/tart"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

const image = "ghcr.io/cirruslabs/macos-sequoia-base:latest"

// fakeTart is the faketart binary, built once for the package.
var fakeTart string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faketart")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeTart, err = build.To(dir)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// setup makes a TART_HOME with the knobs and a driver for it; Start must
// see tart's control socket to return, as StartSettle is an hour.
func setup(t *testing.T, k build.Knobs) (*tart.Driver, string) {
	t.Helper()
	if k.Images == nil {
		k.Images = []string{image}
	}
	home := t.TempDir()
	if err := build.WriteKnobs(home, k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { build.KillAll(home) })
	return driver(home, t.TempDir()), home
}

func driver(home, state string) *tart.Driver {
	d := tart.New(fakeTart, state)
	d.Env = []string{"TART_HOME=" + home}
	d.PollInterval = 20 * time.Millisecond
	d.StartTimeout = time.Minute
	d.StartSettle = time.Hour
	return d
}

func create(t *testing.T, d *tart.Driver, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := d.Create(context.Background(), n, vz.CreateOptions{Image: image}); err != nil {
			t.Fatalf("Create(%s): %v", n, err)
		}
	}
}

func start(t *testing.T, d *tart.Driver, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := d.Start(context.Background(), n, vz.StartOptions{}); err != nil {
			t.Fatalf("Start(%s): %v", n, err)
		}
	}
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func state(t *testing.T, d *tart.Driver, name string) vz.State {
	t.Helper()
	vm, err := d.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return vm.State
}

func noStop(t *testing.T, home string) {
	t.Helper()
	used, err := build.Used(home, "stop")
	if err != nil || used {
		t.Fatalf("tart stop was invoked (%v, %v)", used, err)
	}
}

func TestLifecycle(t *testing.T) {
	d, home := setup(t, build.Knobs{ShutdownDelayMillis: 50, PowerButtonShutsDown: true})
	ctx := context.Background()
	if d.Name() != "tart" {
		t.Fatalf("Name() = %q", d.Name())
	}
	if err := d.Create(ctx, "vm1", vz.CreateOptions{Image: image, CPUs: 6, MemoryMiB: 12288}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustErr(t, d.Create(ctx, "vm1", vz.CreateOptions{Image: image}), vz.ErrExists)
	var cfg struct {
		CPU    int `json:"cpuCount"`
		Memory int `json:"memorySizeMB"`
	}
	b, _ := os.ReadFile(filepath.Join(home, "vms", "vm1", "config.json")) //nolint:gosec // G304: the test's temp dir.
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.CPU != 6 || cfg.Memory != 12288 {
		t.Fatalf("CPU and memory not set: %s %v", b, err)
	}
	vms, err := d.List(ctx)
	if err != nil || len(vms) != 1 || vms[0] != (vz.VM{Name: "vm1", State: vz.StateStopped, MAC: macOf(t, home, "vm1")}) {
		t.Fatalf("List = %+v, %v", vms, err)
	}
	dir := filepath.Join(t.TempDir(), "macvirt")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, "vm1", vz.StartOptions{ConfigDir: dir}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	b, _ = os.ReadFile(filepath.Join(home, "vms", "vm1", "run.json")) //nolint:gosec // G304: the test's temp dir.
	if !strings.Contains(string(b), `"--no-graphics"`) || !strings.Contains(string(b), `"--dir=macvirt:`+dir+`:ro"`) {
		t.Fatalf("tart run arguments: %s", b)
	}
	// As tart's named share on the automount tag: macOS shows it at
	// /Volumes/My Shared Files/macvirt.
	if b, err := os.ReadFile(filepath.Join(build.GuestRoot(home, "vm1"), "Volumes", "My Shared Files", "macvirt", "token")); err != nil || string(b) != "t" {
		t.Fatalf("the share in the guest: %q, %v", b, err)
	}
	vm, err := d.Get(ctx, "vm1")
	if err != nil || vm.State != vz.StateRunning || !strings.HasPrefix(vm.IP, "192.168.64.") || vm.MAC != macOf(t, home, "vm1") {
		t.Fatalf("Get = %+v, %v", vm, err)
	}
	mustErr(t, d.Start(ctx, "vm1", vz.StartOptions{}), vz.ErrAlreadyRunning)
	mustErr(t, d.Delete(ctx, "vm1"), vz.ErrRunning)
	if s, err := d.Slots(ctx); err != nil || s != (vz.Slots{Max: 2, Running: 1}) {
		t.Fatalf("Slots = %+v, %v", s, err)
	}
	// tart lists a pulled image by its tag and by its digest.
	digest, err := d.ImageDigest(ctx, image)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("ImageDigest = %q, %v", digest, err)
	}
	if imgs, err := d.Images(ctx); err != nil || len(imgs) != 2 || imgs[0] != image ||
		imgs[1] != strings.TrimSuffix(image, ":latest")+"@"+digest {
		t.Fatalf("Images = %v, %v", imgs, err)
	}
	if err := d.RequestStop(ctx, "vm1"); err != nil {
		t.Fatalf("RequestStop: %v", err)
	}
	eventually(t, "vm1 stops", func() bool { return state(t, d, "vm1") == vz.StateStopped })
	if how := build.LastExit(home, "vm1"); how != "shutdown" {
		t.Fatalf("vm1 ended %q, want the guest's shutdown", how)
	}
	mustErr(t, d.RequestStop(ctx, "vm1"), vz.ErrNotRunning)
	if err := d.Delete(ctx, "vm1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := d.Delete(ctx, "vm1"); err != nil {
		t.Fatalf("Delete of a deleted VM: %v", err)
	}
	noStop(t, home)
}

func TestNotFound(t *testing.T) {
	d, _ := setup(t, build.Knobs{})
	ctx := context.Background()
	_, err := d.Get(ctx, "nope")
	mustErr(t, err, vz.ErrNotFound)
	if !strings.Contains(err.Error(), `the specified VM "nope" does not exist`) {
		t.Fatalf("error lacks tart's words: %v", err)
	}
	mustErr(t, d.Start(ctx, "nope", vz.StartOptions{}), vz.ErrNotFound)
	mustErr(t, d.RequestStop(ctx, "nope"), vz.ErrNotFound)
}

// TestTartWordsMapped runs tart commands the driver avoids by checking
// first, to prove the exit-code mapping against the fake's words.
func TestTartWordsMapped(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	create(t, d, "a", "b")
	start(t, d, "a")
	run := func(args ...string) (int, string) {
		cmd := exec.Command(fakeTart, args...) //nolint:gosec // G204: the test's fake.
		cmd.Env = append(os.Environ(), "TART_HOME="+home)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{"delete", "a"}, 1, `VM "a" is running`},
		{[]string{"run", "a", "--no-graphics"}, 2, `VM "a" is already running!`},
		{[]string{"get", "x", "--format", "json"}, 2, `the specified VM "x" does not exist`},
		// Suspend.swift wraps its message in RuntimeError.VMNotRunning's.
		{[]string{"suspend", "b"}, 2, `VM "VM "b" is not running" is not running`},
		{[]string{"suspend", "x"}, 2, `the specified VM "x" does not exist`},
	} {
		if code, out := run(c.args...); code != c.code || out != c.text {
			t.Errorf("tart %v = %d %q, want %d %q", c.args, code, out, c.code, c.text)
		}
	}
	if code, out := run("stop", "nothere"); code != 2 || !strings.Contains(out, "does not exist") {
		t.Errorf("tart stop nothere = %d %q", code, out)
	}
}

func TestSlotsExhausted(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	create(t, d, "a", "b", "c")
	start(t, d, "a", "b")
	err := d.Start(context.Background(), "c", vz.StartOptions{})
	mustErr(t, err, vz.ErrVMLimit)
	if !strings.Contains(err.Error(), "The number of VMs exceeds the system limit (other running VMs: a, b)") {
		t.Fatalf("error lacks tart's words: %v", err)
	}
	if s, _ := d.Slots(context.Background()); s.Running != 2 {
		t.Fatalf("Slots = %+v, want 2 running", s)
	}
	noStop(t, home)
}

func TestStuckCount(t *testing.T) {
	d, _ := setup(t, build.Knobs{Stuck: true})
	create(t, d, "a")
	err := d.Start(context.Background(), "a", vz.StartOptions{})
	mustErr(t, err, vz.ErrVMLimit)
	if s, _ := d.Slots(context.Background()); s.Running != 0 {
		t.Fatalf("Slots = %+v, want 0 running", s)
	}
	if st := state(t, d, "a"); st != vz.StateStopped {
		t.Fatalf("state after a refused start = %s", st)
	}
}

// TestLimitAfterLock: tart lists a VM running from the moment tart run
// holds its lock, before the framework refuses it; Start must not take
// that for a start.
func TestLimitAfterLock(t *testing.T) {
	d, _ := setup(t, build.Knobs{Stuck: true, BootMillis: 500})
	create(t, d, "a")
	mustErr(t, d.Start(context.Background(), "a", vz.StartOptions{}), vz.ErrVMLimit)
	d2, _ := setup(t, build.Knobs{BootMillis: 500})
	create(t, d2, "b")
	start(t, d2, "b")
	if st := state(t, d2, "b"); st != vz.StateRunning {
		t.Fatalf("state after Start = %s", st)
	}
}

// TestStartWithoutControlSocket: without tart's control socket (macOS
// 13), Start trusts a run that stays up for StartSettle.
func TestStartWithoutControlSocket(t *testing.T) {
	d, _ := setup(t, build.Knobs{NoControlSocket: true})
	d.StartSettle = 100 * time.Millisecond
	create(t, d, "a")
	start(t, d, "a")
	if st := state(t, d, "a"); st != vz.StateRunning {
		t.Fatalf("state after Start = %s", st)
	}
}

// TestTheDialog: macOS answers the power button (requestStop) with a
// dialog, as tart's source warns: by default the fake guest keeps running,
// and the driver forces nothing.
func TestTheDialog(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	create(t, d, "a")
	start(t, d, "a")
	if err := d.RequestStop(context.Background(), "a"); err != nil {
		t.Fatalf("RequestStop: %v", err)
	}
	log := filepath.Join(d.StateDir, "a.log")
	eventually(t, "tart run gets the request", func() bool {
		b, _ := os.ReadFile(log) //nolint:gosec // G304: the test's temp dir.
		return strings.Contains(string(b), "Requesting guest OS to stop...")
	})
	if st := state(t, d, "a"); st != vz.StateRunning {
		t.Fatalf("state = %s, want Running", st)
	}
	if how := build.LastExit(home, "a"); how != "" {
		t.Fatalf("the VM ended %q", how)
	}
	// Told from inside (the guest agent's shutdown -h now), macOS shuts
	// down, and the run ends as a shutdown.
	if err := build.HaltGuest(home, "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a stops once told from inside", func() bool { return state(t, d, "a") == vz.StateStopped })
	if how := build.LastExit(home, "a"); how != "shutdown" {
		t.Fatalf("the VM ended %q, want shutdown", how)
	}
	noStop(t, home)
}

// TestRestart: a new driver, as after the host agent's restart, finds the
// tart run its predecessor started, by the PID file, and else by tart's
// lock; the run is in a session of its own.
func TestRestart(t *testing.T) {
	d1, home := setup(t, build.Knobs{PowerButtonShutsDown: true})
	create(t, d1, "a", "b")
	start(t, d1, "a", "b")
	b, err := os.ReadFile(filepath.Join(d1.StateDir, "a.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Fatalf("tart run %d is in process group %d (%v), want its own session", pid, pgid, err)
	}
	d2 := driver(home, d1.StateDir)
	if err := d2.RequestStop(context.Background(), "a"); err != nil {
		t.Fatalf("RequestStop by a new driver: %v", err)
	}
	eventually(t, "a stops", func() bool { return state(t, d2, "a") == vz.StateStopped })
	d3 := driver(home, t.TempDir()) // its state directory lost
	if err := d3.RequestStop(context.Background(), "b"); err != nil {
		t.Fatalf("RequestStop without a PID file: %v", err)
	}
	eventually(t, "b stops", func() bool { return state(t, d3, "b") == vz.StateStopped })
	for _, n := range []string{"a", "b"} {
		if how := build.LastExit(home, n); how != "shutdown" {
			t.Fatalf("%s ended %q", n, how)
		}
	}
	noStop(t, home)
}

// TestStalePID: a PID file naming another process is not signalled.
func TestStalePID(t *testing.T) {
	d, home := setup(t, build.Knobs{PowerButtonShutsDown: true})
	create(t, d, "a")
	start(t, d, "a")
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	if err := os.WriteFile(filepath.Join(d.StateDir, "a.pid"), []byte(strconv.Itoa(other.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.RequestStop(context.Background(), "a"); err != nil {
		t.Fatalf("RequestStop: %v", err)
	}
	eventually(t, "a stops", func() bool { return state(t, d, "a") == vz.StateStopped })
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the other process was signalled: %v", err)
	}
	noStop(t, home)
}

func TestUnknownImage(t *testing.T) {
	d, _ := setup(t, build.Knobs{})
	ref := "ghcr.io/cirruslabs/macos-nothing:1.0"
	err := d.Create(context.Background(), "x", vz.CreateOptions{Image: ref})
	if err == nil || !strings.Contains(err.Error(), ref) {
		t.Fatalf("error = %v, want one naming %s", err, ref)
	}
	if _, err := d.Get(context.Background(), "x"); !errors.Is(err, vz.ErrNotFound) {
		t.Fatalf("a failed clone left a VM: %v", err)
	}
}

// macOf reads a fake VM's MAC address from its config.json, where tart
// keeps it (tart get does not show it).
func macOf(t *testing.T, home, name string) string {
	t.Helper()
	var c struct {
		MAC string `json:"macAddress"`
	}
	b, err := os.ReadFile(filepath.Join(home, "vms", name, "config.json")) //nolint:gosec // G304: the test's temp dir.
	if err != nil || json.Unmarshal(b, &c) != nil || c.MAC == "" {
		t.Fatalf("the MAC address of %s: %s %v", name, b, err)
	}
	return c.MAC
}

// TestVMsOfOneImageHaveTheirOwnMAC: every VM the agent makes clones the
// class's image, which carries one MAC address; tart gives a clone a new
// one when a local VM has the source's (Clone.swift), and a VM one when a
// running VM has its own (Run.swift). Two VMs of one image on a Mac never
// share a MAC address, which would give them one DHCP lease.
func TestVMsOfOneImageHaveTheirOwnMAC(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	create(t, d, "a", "b")
	start(t, d, "a", "b")
	if a, b := macOf(t, home, "a"), macOf(t, home, "b"); a == b {
		t.Fatalf("two VMs of one image run with one MAC address %s", a)
	}
	// A third, made once the first is gone, may take the image's address
	// again: no local VM has it then.
	if err := d.RequestStop(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := build.HaltGuest(home, "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a stops", func() bool { return state(t, d, "a") == vz.StateStopped })
	if err := d.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	create(t, d, "c")
	start(t, d, "c")
	if b, c := macOf(t, home, "b"), macOf(t, home, "c"); b == c {
		t.Fatalf("two running VMs of one image share the MAC address %s", b)
	}
}

// TestForceStop: tart stop turns a VM whose macOS shows the dialog off,
// and the run ends as a forced one; a stopped VM is not running.
func TestForceStop(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	create(t, d, "a")
	start(t, d, "a")
	if err := d.ForceStop(context.Background(), "a"); err != nil {
		t.Fatalf("ForceStop: %v", err)
	}
	eventually(t, "a is off", func() bool { return state(t, d, "a") == vz.StateStopped })
	if how := build.LastExit(home, "a"); how != "forced" {
		t.Fatalf("the VM ended %q, want forced", how)
	}
	mustErr(t, d.ForceStop(context.Background(), "a"), vz.ErrNotRunning)
}

// TestPullProgress: a clone that pulls tells its progress as tart prints
// it, in bytes of the compressed disk, to the end.
func TestPullProgress(t *testing.T) {
	const big = "ghcr.io/cirruslabs/macos-tahoe-xcode:26"
	d, _ := setup(t, build.Knobs{Images: []string{big}, ImageSizes: map[string]int64{big: 3e9}, PullBytesPerSecond: 1e9})
	var seen []vz.PullProgress
	if err := d.Create(context.Background(), "a", vz.CreateOptions{Image: big, Progress: func(p vz.PullProgress) { seen = append(seen, p) }}); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 3 {
		t.Fatalf("progress told %d times (%v); want the size, at least one percentage, and the end", len(seen), seen)
	}
	for i, p := range seen {
		if p.TotalBytes != 3e9 || (i > 0 && p.CompletedBytes <= seen[i-1].CompletedBytes) {
			t.Fatalf("progress %v: want 3e9 bytes in all, rising", seen)
		}
	}
	if seen[0].CompletedBytes != 0 || seen[len(seen)-1].CompletedBytes != 3e9 {
		t.Fatalf("progress %v: want it from 0 to all 3e9 bytes", seen)
	}
}

// TestPullCancelled: a cancelled clone ends at once (SIGINT, on which tart
// cancels its pull), leaving no VM and no cached image.
func TestPullCancelled(t *testing.T) {
	const big = "ghcr.io/cirruslabs/macos-tahoe-xcode:26"
	d, _ := setup(t, build.Knobs{Images: []string{big}, ImageSizes: map[string]int64{big: 1e12}, PullBytesPerSecond: 1e9})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- d.Create(ctx, "a", vz.CreateOptions{Image: big, Progress: func(vz.PullProgress) {
			select {
			case started <- struct{}{}:
			default:
			}
		}})
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		mustErr(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled pull of 1000 GB did not end within 30s")
	}
	if _, err := d.Get(context.Background(), "a"); !errors.Is(err, vz.ErrNotFound) {
		t.Fatalf("Get after a cancelled pull: %v; want ErrNotFound", err)
	}
	imgs, err := d.Images(context.Background())
	if err != nil || len(imgs) != 0 {
		t.Fatalf("Images after a cancelled pull: %v, %v; want none", imgs, err)
	}
}

// A re-pushed tag reaches a new VM only with PullAlways: tart's clone
// uses a cached tag whatever the registry has, tart pull asks the
// registry and moves the tag to the new digest.
func TestPullAlwaysTakesARepushedTag(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	ctx := context.Background()
	create(t, d, "a")
	first, err := d.ImageDigest(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	const repushed = "sha256:00000000000000000000000000000000000000000000000000000000000000aa"
	k, err := build.ReadKnobs(home)
	if err != nil {
		t.Fatal(err)
	}
	k.Digests = map[string]string{image: repushed}
	if err := build.WriteKnobs(home, k); err != nil {
		t.Fatal(err)
	}
	create(t, d, "b")
	if got, _ := d.ImageDigest(ctx, image); got != first {
		t.Fatalf("after a clone with the tag cached, the tag is at %s; want %s still", got, first)
	}
	if err := d.Create(ctx, "c", vz.CreateOptions{Image: image, PullAlways: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.ImageDigest(ctx, image); got != repushed {
		t.Fatalf("after a pull, the tag is at %s; want the re-pushed %s", got, repushed)
	}
	used, err := build.Used(home, "pull")
	if err != nil || !used {
		t.Fatalf("tart pull was not run (%v, %v)", used, err)
	}
	// Pull alone (a class's image.refresh) moves the tag too.
	const again = "sha256:00000000000000000000000000000000000000000000000000000000000000bb"
	k.Digests = map[string]string{image: again}
	if err := build.WriteKnobs(home, k); err != nil {
		t.Fatal(err)
	}
	if err := d.Pull(ctx, image); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.ImageDigest(ctx, image); got != again {
		t.Fatalf("after Pull, the tag is at %s; want %s", got, again)
	}
}

// tartRun runs the fake tart as the test, not the driver, would.
func tartRun(t *testing.T, home string, args ...string) {
	t.Helper()
	cmd := exec.Command(fakeTart, args...) //nolint:gosec // G204: the test's fake.
	cmd.Env = append(os.Environ(), "TART_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tart %v: %v: %s", args, err, out)
	}
}

func runArgs(t *testing.T, home, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "vms", name, "run.json")) //nolint:gosec // G304: the test's temp dir.
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(home, name, file string) bool {
	_, err := os.Stat(filepath.Join(home, "vms", name, file))
	return err == nil
}

// TestSuspendAndRestore: a VM started Suspendable is saved beside its
// disk, as large as its memory, holds no slot, and its next start, even
// one not asked Suspendable, restores it without booting it.
func TestSuspendAndRestore(t *testing.T) {
	d, home := setup(t, build.Knobs{ResumeMillis: 50})
	ctx := context.Background()
	if err := d.CanSuspend(ctx); err != nil {
		t.Fatalf("CanSuspend: %v", err)
	}
	if err := d.Create(ctx, "a", vz.CreateOptions{Image: image, MemoryMiB: 4096}); err != nil {
		t.Fatal(err)
	}
	mustErr(t, d.Suspend(ctx, "a"), vz.ErrNotRunning)
	_, err := d.Get(ctx, "nope")
	mustErr(t, err, vz.ErrNotFound)
	mustErr(t, d.Suspend(ctx, "nope"), vz.ErrNotFound)
	if err := d.Start(ctx, "a", vz.StartOptions{Suspendable: true}); err != nil {
		t.Fatal(err)
	}
	if args := runArgs(t, home, "a"); !strings.Contains(args, `"--suspendable"`) {
		t.Fatalf("tart run arguments: %s", args)
	}
	boot := build.BootID(home, "a")
	if boot == "" {
		t.Fatal("the guest has no boot id")
	}
	if err := d.Suspend(ctx, "a"); err != nil {
		t.Fatalf("Suspend: %v", err)
	}
	if st := state(t, d, "a"); st != vz.StateSuspended {
		t.Fatalf("state after Suspend = %s", st)
	}
	if how := build.LastExit(home, "a"); how != "suspended" {
		t.Fatalf("the run ended %q, want suspended", how)
	}
	fi, err := os.Stat(filepath.Join(home, "vms", "a", build.StateFile))
	if err != nil || fi.Size() != 4096<<20 {
		t.Fatalf("the saved state: %v, %v; want 4096 MiB", fi, err)
	}
	if vms, err := d.List(ctx); err != nil || len(vms) != 1 || vms[0].State != vz.StateSuspended {
		t.Fatalf("List = %+v, %v", vms, err)
	}
	if s, err := d.Slots(ctx); err != nil || s.Running != 0 {
		t.Fatalf("Slots = %+v, %v; want none running", s, err)
	}
	if err := d.Suspend(ctx, "a"); err != nil {
		t.Fatalf("Suspend of a suspended VM: %v", err)
	}
	mustErr(t, d.ForceStop(ctx, "a"), vz.ErrNotRunning)
	mustErr(t, d.RequestStop(ctx, "a"), vz.ErrNotRunning)

	start(t, d, "a")
	if st := state(t, d, "a"); st != vz.StateRunning {
		t.Fatalf("state after the restore = %s", st)
	}
	if exists(home, "a", build.StateFile) {
		t.Fatal("the saved state outlived its restore")
	}
	if got := build.BootID(home, "a"); got != boot {
		t.Fatalf("boot id %s after the restore, want %s: the guest booted", got, boot)
	}
	if args := runArgs(t, home, "a"); !strings.Contains(args, `"--suspendable"`) {
		t.Fatalf("a suspended VM was restored with %s; want --suspendable", args)
	}
	if b, _ := os.ReadFile(filepath.Join(d.StateDir, "a.log")); !strings.Contains(string(b), "restoring VM state from a snapshot...") {
		t.Fatalf("the run's output: %s", b)
	}
	// Restored, it is suspendable again; suspended, it may be deleted.
	if err := d.Suspend(ctx, "a"); err != nil {
		t.Fatalf("Suspend after a restore: %v", err)
	}
	if err := d.Delete(ctx, "a"); err != nil {
		t.Fatalf("Delete of a suspended VM: %v", err)
	}
	if _, err := d.Get(ctx, "a"); !errors.Is(err, vz.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	noStop(t, home)
}

// TestSuspendUnsuspendable: tart cannot save a VM not started Suspendable;
// its run exits, ending the VM, and Suspend says so in tart's words.
func TestSuspendUnsuspendable(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	ctx := context.Background()
	create(t, d, "a")
	start(t, d, "a")
	boot := build.BootID(home, "a")
	err := d.Suspend(ctx, "a")
	if err == nil || !strings.Contains(err.Error(), "without saving") || !strings.Contains(err.Error(), "Failed to suspend the VM") {
		t.Fatalf("Suspend of a VM not started suspendable: %v", err)
	}
	if errors.Is(err, vz.ErrNotRunning) {
		t.Fatalf("Suspend error %v is not a refusal of a stopped VM", err)
	}
	if st := state(t, d, "a"); st != vz.StateStopped {
		t.Fatalf("state = %s, want Stopped", st)
	}
	if how := build.LastExit(home, "a"); how != "killed" {
		t.Fatalf("the run ended %q, want killed", how)
	}
	if exists(home, "a", build.StateFile) {
		t.Fatal("a state file was written")
	}
	mustErr(t, d.Suspend(ctx, "a"), vz.ErrNotRunning)
	start(t, d, "a")
	if got := build.BootID(home, "a"); got == "" || got == boot {
		t.Fatalf("boot id %q after a start, want a new one (was %s)", got, boot)
	}
}

// TestMACCollisionDropsSavedState: a clone of a suspended VM keeps its MAC
// address and its saved state (Clone.swift); run once the source runs, it
// gets a new MAC address, which drops the saved state
// (VMDirectory.regenerateMACAddress), and boots cold.
func TestMACCollisionDropsSavedState(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	ctx := context.Background()
	create(t, d, "a")
	if err := d.Start(ctx, "a", vz.StartOptions{Suspendable: true}); err != nil {
		t.Fatal(err)
	}
	boot := build.BootID(home, "a")
	if err := d.Suspend(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	tartRun(t, home, "clone", "a", "b")
	mac := macOf(t, home, "a")
	if got := macOf(t, home, "b"); got != mac {
		t.Fatalf("the clone of a suspended VM has MAC %s, want its source's %s", got, mac)
	}
	if st := state(t, d, "b"); st != vz.StateSuspended {
		t.Fatalf("the clone is %s, want Suspended", st)
	}
	start(t, d, "a")
	if got := build.BootID(home, "a"); got != boot {
		t.Fatalf("a booted (boot id %s, want %s)", got, boot)
	}
	start(t, d, "b")
	if got := macOf(t, home, "b"); got == mac {
		t.Fatalf("b runs beside a with one MAC address %s", got)
	}
	if exists(home, "b", build.StateFile) {
		t.Fatal("b kept the saved state")
	}
	if got := build.BootID(home, "b"); got == "" || got == boot {
		t.Fatalf("b's boot id %q: want a cold boot's new one", got)
	}
	b, _ := os.ReadFile(filepath.Join(d.StateDir, "b.log"))
	if !strings.Contains(string(b), "Resetting VM to assign a new MAC address...") || strings.Contains(string(b), "restoring") {
		t.Fatalf("b's run: %s", b)
	}
}

// TestRandomSerial: every clone of an image has the image's machine
// identifier, the serial number macOS shows; Create gives each VM its own.
func TestRandomSerial(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	tartRun(t, home, "clone", image, "x")
	tartRun(t, home, "clone", image, "y")
	if x, y := build.Serial(home, "x"), build.Serial(home, "y"); x == "" || x != y {
		t.Fatalf("two plain clones of one image have serials %q and %q; want the image's", x, y)
	}
	create(t, d, "a", "b")
	a, b := build.Serial(home, "a"), build.Serial(home, "b")
	if a == "" || a == b || a == build.Serial(home, "x") || b == build.Serial(home, "x") {
		t.Fatalf("serials %q and %q (the image's %q); want one of its own each", a, b, build.Serial(home, "x"))
	}
	cmds, err := build.Commands(home)
	if err != nil || !slices.Contains(cmds, "set a --random-serial") {
		t.Fatalf("commands %v, %v; want one set with --random-serial", cmds, err)
	}
}

// A saved state dropped (tart stop of a suspended VM, Stop.swift's
// stopSuspended) leaves a stopped VM whose next run boots cold.
func TestDiscardSavedState(t *testing.T) {
	d, home := setup(t, build.Knobs{})
	ctx := context.Background()
	if err := d.Create(ctx, "a", vz.CreateOptions{Image: image}); err != nil {
		t.Fatal(err)
	}
	if err := d.DiscardSavedState(ctx, "a"); err != nil {
		t.Fatalf("DiscardSavedState of a stopped VM: %v", err)
	}
	if err := d.Start(ctx, "a", vz.StartOptions{Suspendable: true}); err != nil {
		t.Fatal(err)
	}
	boot := build.BootID(home, "a")
	if err := d.Suspend(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := d.DiscardSavedState(ctx, "a"); err != nil {
		t.Fatalf("DiscardSavedState: %v", err)
	}
	if st := state(t, d, "a"); st != vz.StateStopped {
		t.Fatalf("state after DiscardSavedState = %s; want Stopped", st)
	}
	if err := d.Start(ctx, "a", vz.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if b := build.BootID(home, "a"); b == "" || b == boot {
		t.Fatalf("boot id %q after the drop, %q before: want a cold boot", b, boot)
	}
	if err := d.ForceStop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}
