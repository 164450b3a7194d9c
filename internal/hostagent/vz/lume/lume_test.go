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

package lume_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/hostagent/vz/lume"
	"github.com/macvirt/macvirt/test/infrastructure/fakelume"
)

const image = "ghcr.io/trycua/macos-sequoia-vanilla:latest"

// setup starts a fake lume and a driver with short waits.
func setup(t *testing.T, opts fakelume.Options) (*lume.Driver, *fakelume.Server) {
	t.Helper()
	if opts.Images == nil {
		opts.Images = []string{image}
	}
	fake := fakelume.New(t.TempDir(), opts)
	ts := fakelume.Start(t, fake)
	d := lume.New(ts.URL)
	d.Client = ts.Client()
	d.StartTimeout = 5 * time.Second
	d.PollInterval = 10 * time.Millisecond
	return d, fake
}

func create(t *testing.T, d *lume.Driver, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := d.Create(context.Background(), n, vz.CreateOptions{Image: image}); err != nil {
			t.Fatalf("Create(%s): %v", n, err)
		}
	}
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want %v", err, want)
	}
}

func TestLifecycle(t *testing.T) {
	d, fake := setup(t, fakelume.Options{StartDelay: 50 * time.Millisecond})
	ctx := context.Background()
	if d.Name() != "lume" {
		t.Fatalf("Name() = %q", d.Name())
	}
	if err := d.Create(ctx, "vm1", vz.CreateOptions{Image: image, CPUs: 6, MemoryMiB: 12288}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	mustErr(t, d.Create(ctx, "vm1", vz.CreateOptions{Image: image}), vz.ErrExists)
	b, err := os.ReadFile(filepath.Join(fake.Dir, "vm1", "vm.json"))
	if err != nil || !strings.Contains(string(b), `"cpuCount":6`) || !strings.Contains(string(b), `"memorySize":12884901888`) {
		t.Fatalf("CPU and memory not set: %s %v", b, err)
	}
	vms, err := d.List(ctx)
	if err != nil || len(vms) != 1 || vms[0] != (vz.VM{Name: "vm1", State: vz.StateStopped}) {
		t.Fatalf("List = %+v, %v", vms, err)
	}
	cfg := filepath.Join(t.TempDir(), "macvirt")
	if err := os.MkdirAll(cfg, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, "vm1", vz.StartOptions{ConfigDir: cfg}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	vm, err := d.Get(ctx, "vm1")
	if err != nil || vm.State != vz.StateRunning || vm.IP == "" {
		t.Fatalf("Get = %+v, %v", vm, err)
	}
	b, _ = os.ReadFile(filepath.Join(fake.Dir, "vm1", "vm.json"))
	if !strings.Contains(string(b), cfg+":ro") {
		t.Fatalf("config dir not shared read-only: %s", b)
	}
	// lume names a share after its last element: macOS shows it at
	// /Volumes/My Shared Files/macvirt.
	if b, err := os.ReadFile(filepath.Join(fake.GuestRoot("vm1"), "Volumes", "My Shared Files", "macvirt", "token")); err != nil || string(b) != "t" {
		t.Fatalf("the share in the guest: %q, %v", b, err)
	}
	mustErr(t, d.Start(ctx, "vm1", vz.StartOptions{}), vz.ErrAlreadyRunning)
	mustErr(t, d.Delete(ctx, "vm1"), vz.ErrRunning)
	s, err := d.Slots(ctx)
	if err != nil || s != (vz.Slots{Max: 2, Running: 1}) {
		t.Fatalf("Slots = %+v, %v", s, err)
	}
	imgs, err := d.Images(ctx)
	if err != nil || len(imgs) != 1 || !strings.HasPrefix(imgs[0], "macos-sequoia-vanilla:") {
		t.Fatalf("Images = %v, %v", imgs, err)
	}
	mustErr(t, d.RequestStop(ctx, "vm1"), vz.ErrNoGracefulStop)
	if err := fake.GuestShutdown("vm1"); err != nil {
		t.Fatal(err)
	}
	mustErr(t, d.RequestStop(ctx, "vm1"), vz.ErrNotRunning)
	if err := d.Delete(ctx, "vm1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := d.Delete(ctx, "vm1"); err != nil {
		t.Fatalf("Delete of a deleted VM: %v", err)
	}
	if n := fake.ForcedStops(); n != 0 {
		t.Fatalf("forced stops = %d, want 0", n)
	}
}

func TestNotFound(t *testing.T) {
	d, fake := setup(t, fakelume.Options{})
	ctx := context.Background()
	_, err := d.Get(ctx, "nope")
	mustErr(t, err, vz.ErrNotFound)
	if !strings.Contains(err.Error(), "Virtual machine not found: nope") {
		t.Fatalf("error lacks lume's words: %v", err)
	}
	mustErr(t, d.Start(ctx, "nope", vz.StartOptions{}), vz.ErrNotFound)
	mustErr(t, d.RequestStop(ctx, "nope"), vz.ErrNotFound)
	if strings.Contains(fake.Log(), "Starting VM") {
		t.Fatal("the driver asked lume to run a VM that does not exist")
	}
}

func TestSlotsExhausted(t *testing.T) {
	d, fake := setup(t, fakelume.Options{})
	create(t, d, "a", "b", "c")
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if err := d.Start(ctx, n, vz.StartOptions{}); err != nil {
			t.Fatalf("Start(%s): %v", n, err)
		}
	}
	err := d.Start(ctx, "c", vz.StartOptions{})
	mustErr(t, err, vz.ErrVMLimit)
	if strings.Contains(fake.Log(), "Starting VM in background name=c") {
		t.Fatal("the driver asked lume to run a VM with no free slot")
	}
	if s, _ := d.Slots(ctx); s.Running != 2 {
		t.Fatalf("Slots = %+v, want 2 running", s)
	}
	if fake.ForcedStops() != 0 {
		t.Fatal("a VM was forced off")
	}
}

// TestLimitFromLog: lume's host status shows a free slot, the framework
// refuses anyway, and only lume's log says so.
func TestLimitFromLog(t *testing.T) {
	d, fake := setup(t, fakelume.Options{MaxVMs: 1, StartDelay: 20 * time.Millisecond})
	create(t, d, "a", "b")
	ctx := context.Background()
	if err := d.Start(ctx, "a", vz.StartOptions{}); err != nil {
		t.Fatalf("Start(a): %v", err)
	}
	d.StartTimeout = time.Hour // the log, not the timeout, must end the wait
	err := d.Start(ctx, "b", vz.StartOptions{})
	mustErr(t, err, vz.ErrVMLimit)
	if !strings.Contains(err.Error(), fakelume.LimitText) {
		t.Fatalf("error lacks the framework's words: %v", err)
	}
	if s, _ := d.Slots(ctx); s.Running != 1 || s.Max != 2 {
		t.Fatalf("Slots = %+v, want 1 of 2 running (lume's count)", s)
	}
	if fake.ForcedStops() != 0 {
		t.Fatal("a VM was forced off")
	}
}

func TestStuckCount(t *testing.T) {
	d, fake := setup(t, fakelume.Options{Stuck: true})
	create(t, d, "a")
	ctx := context.Background()
	err := d.Start(ctx, "a", vz.StartOptions{})
	mustErr(t, err, vz.ErrVMLimit)
	if s, _ := d.Slots(ctx); s.Running != 0 || s.Max != 2 {
		t.Fatalf("Slots = %+v, want 0 of 2 running", s)
	}
	vm, _ := d.Get(ctx, "a")
	if vm.State != vz.StateStopped {
		t.Fatalf("VM state = %s after a refused start", vm.State)
	}
	if fake.ForcedStops() != 0 {
		t.Fatal("a VM was forced off")
	}
}

// TestStartTimeoutWithoutLogs: lume without log files and with free slots
// gives no cause; the driver must not claim the VM limit.
func TestStartTimeoutWithoutLogs(t *testing.T) {
	d, _ := setup(t, fakelume.Options{Stuck: true, NoLogs: true})
	create(t, d, "a")
	d.StartTimeout = 200 * time.Millisecond
	err := d.Start(context.Background(), "a", vz.StartOptions{})
	if err == nil || errors.Is(err, vz.ErrVMLimit) {
		t.Fatalf("error = %v, want a timeout that is not ErrVMLimit", err)
	}
}

func TestUnknownImage(t *testing.T) {
	d, _ := setup(t, fakelume.Options{})
	ref := "ghcr.io/trycua/macos-nothing:1.0"
	err := d.Create(context.Background(), "x", vz.CreateOptions{Image: ref})
	if err == nil || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), fakelume.ManifestFetchFailed) {
		t.Fatalf("error = %v, want one naming %s with lume's words", err, ref)
	}
	if _, err := d.Get(context.Background(), "x"); !errors.Is(err, vz.ErrNotFound) {
		t.Fatalf("a failed pull left a VM: %v", err)
	}
}

func TestSplitImage(t *testing.T) {
	for _, c := range []struct{ in, reg, org, img string }{
		{"ghcr.io/trycua/macos-sequoia-vanilla:latest", "ghcr.io", "trycua", "macos-sequoia-vanilla:latest"},
		{"ghcr.io/cirruslabs/macos-sequoia-base", "ghcr.io", "cirruslabs", "macos-sequoia-base:latest"},
		{"trycua/macos:15", "ghcr.io", "trycua", "macos:15"},
		{"registry.local:5000/a/b/img:t", "registry.local:5000", "a/b", "img:t"},
	} {
		reg, org, img, err := lume.SplitImage(c.in)
		if err != nil || reg != c.reg || org != c.org || img != c.img {
			t.Errorf("SplitImage(%q) = %q %q %q %v", c.in, reg, org, img, err)
		}
	}
	for _, bad := range []string{"macos:latest", "ghcr.io/trycua/macos@sha256:abc", "ghcr.io/macos:1"} {
		if _, _, _, err := lume.SplitImage(bad); err == nil {
			t.Errorf("SplitImage(%q) did not fail", bad)
		}
	}
}

// TestNoQueryOnVMs proves the fake routes like lume: a query string on
// /lume/vms matches no route, so the driver's List works only without one.
func TestNoQueryOnVMs(t *testing.T) {
	_, fake := setup(t, fakelume.Options{})
	ts := fakelume.Start(t, fake)
	resp, err := ts.Client().Get(ts.URL + "/lume/vms?storage=x")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET /lume/vms?storage=x = %d, want 404 as lume", resp.StatusCode)
	}
}

// A state lume reports that the driver does not know is lume at work on
// the VM: neither a delete nor a start may cross it.
func TestUnknownStateIsBusy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/lume/vms/vm-1" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"name":"vm-1","status":"pending","ipAddress":null}`))
			return
		}
		t.Errorf("unexpected call %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	d := lume.New(srv.URL)
	ctx := context.Background()
	vm, err := d.Get(ctx, "vm-1")
	if err != nil || vm.State != vz.StateStarting {
		t.Fatalf("Get = %+v, %v; want a busy (starting) VM", vm, err)
	}
	if err := d.Delete(ctx, "vm-1"); !errors.Is(err, vz.ErrRunning) {
		t.Errorf("Delete = %v; want ErrRunning", err)
	}
	if err := d.Start(ctx, "vm-1", vz.StartOptions{}); !errors.Is(err, vz.ErrAlreadyRunning) {
		t.Errorf("Start = %v; want ErrAlreadyRunning", err)
	}
}

// TestVMsOfOneImageHaveTheirOwnMAC: lume gives every VM it pulls a random
// MAC address (pullImage), so two VMs of one class's image on a Mac never
// share one, which would give them one DHCP lease.
func TestVMsOfOneImageHaveTheirOwnMAC(t *testing.T) {
	d, fake := setup(t, fakelume.Options{})
	create(t, d, "a", "b")
	mac := func(name string) string {
		var c struct {
			MAC string `json:"macAddress"`
		}
		b, err := os.ReadFile(filepath.Join(fake.Dir, name, "vm.json")) //nolint:gosec // G304: the test's fake lume directory.
		if err != nil || json.Unmarshal(b, &c) != nil || c.MAC == "" {
			t.Fatalf("the MAC address of %s: %s %v", name, b, err)
		}
		return c.MAC
	}
	if a, b := mac("a"), mac("b"); a == b {
		t.Fatalf("two VMs of one image have one MAC address %s", a)
	}
}

// TestForceStop: lume's stop is the forced one.
func TestForceStop(t *testing.T) {
	d, fake := setup(t, fakelume.Options{})
	ctx := context.Background()
	create(t, d, "a")
	if err := d.Start(ctx, "a", vz.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.ForceStop(ctx, "a"); err != nil {
		t.Fatalf("ForceStop: %v", err)
	}
	if vm, err := d.Get(ctx, "a"); err != nil || vm.State != vz.StateStopped || fake.ForcedStops() != 1 {
		t.Fatalf("after ForceStop: %+v, %v, %d forced stops", vm, err, fake.ForcedStops())
	}
	mustErr(t, d.ForceStop(ctx, "a"), vz.ErrNotRunning)
}

// lume lists a cached image by name and manifest id, never by the tag a
// class names; the driver remembers what it pulled each as, so the class's
// image is found cached, until lume drops that version for another.
func TestImagesMatchClassImages(t *testing.T) {
	const other = "ghcr.io/trycua/macos-sequoia-vanilla:15.2"
	d, _ := setup(t, fakelume.Options{Images: []string{image, other}})
	d.StateDir = t.TempDir()
	ctx := context.Background()
	if err := d.Create(ctx, "a", vz.CreateOptions{Image: image}); err != nil {
		t.Fatal(err)
	}
	imgs, err := d.Images(ctx)
	want := []string{image, "macos-sequoia-vanilla:" + fakelume.ManifestID(image)[:12]}
	if err != nil || !slices.Equal(imgs, want) {
		t.Fatalf("Images after pulling %s = %v, %v; want %v", image, imgs, err, want)
	}
	// Another tag of the same name: lume keeps only its version.
	if err := d.Create(ctx, "b", vz.CreateOptions{Image: other}); err != nil {
		t.Fatal(err)
	}
	imgs, err = d.Images(ctx)
	want = []string{other, "macos-sequoia-vanilla:" + fakelume.ManifestID(other)[:12]}
	if err != nil || !slices.Equal(imgs, want) {
		t.Fatalf("Images after pulling %s = %v, %v; want %v", other, imgs, err, want)
	}
	// A driver without a record (another state directory) sees no class
	// image cached: a preference lost, nothing worse.
	d.StateDir = t.TempDir()
	if imgs, err = d.Images(ctx); err != nil || slices.Contains(imgs, other) {
		t.Fatalf("Images without a record = %v, %v", imgs, err)
	}
}

// lume's pull is asynchronous: the driver polls it, tells its percentage,
// and a failed one is an error naming the cause; a cancelled one cannot be
// stopped in lume, and its VM shows as lume at work (Starting) until lume
// is done.
func TestPullProgressAndCancel(t *testing.T) {
	const big = "ghcr.io/trycua/macos-tahoe-xcode:26"
	d, _ := setup(t, fakelume.Options{Images: []string{image, big}, ImageSizes: map[string]int64{big: 1e9}, PullBytesPerSecond: 2e9})
	ctx := context.Background()
	var seen []int
	if err := d.Create(ctx, "a", vz.CreateOptions{Image: big, Progress: func(p vz.PullProgress) { seen = append(seen, p.Percent) }}); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 || !slices.IsSorted(seen) || seen[0] != 0 {
		t.Fatalf("percentages told: %v; want several, rising from 0", seen)
	}
	if s := state(t, d, "a"); s != vz.StateStopped {
		t.Fatalf("the pulled VM is %s; want Stopped", s)
	}

	err := d.Create(ctx, "b", vz.CreateOptions{Image: "ghcr.io/trycua/nothing:here"})
	if err == nil || !strings.Contains(err.Error(), fakelume.ManifestFetchFailed) {
		t.Fatalf("a pull of an image the registry lacks: %v; want lume's words", err)
	}
	if _, err := d.Get(ctx, "b"); !errors.Is(err, vz.ErrNotFound) {
		t.Fatalf("Get of a VM whose pull failed: %v; want ErrNotFound", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- d.Create(cctx, "c", vz.CreateOptions{Image: big, Progress: func(vz.PullProgress) {
			select {
			case started <- struct{}{}:
			default:
			}
		}})
	}()
	<-started
	cancel()
	mustErr(t, <-done, context.Canceled)
	if s := state(t, d, "c"); s != vz.StateStarting && s != vz.StateStopped {
		t.Fatalf("a VM whose pull lume goes on with is %s; want Starting, then Stopped", s)
	}
}

func state(t *testing.T, d *lume.Driver, name string) vz.State {
	t.Helper()
	vm, err := d.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return vm.State
}

// With the guest's administrator, the driver asks macOS to shut down with
// "lume shutdown" (SSH, sudo shutdown -h now), never lume's forced stop;
// lume's refusals come back in its words.
func TestRequestStopWithLumeShutdown(t *testing.T) {
	cli, err := fakelume.BuildCLI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, fake := setup(t, fakelume.Options{GuestUser: "admin", GuestPassword: "s3cret"})
	t.Setenv("FAKELUME_URL", d.BaseURL)
	ctx := context.Background()
	create(t, d, "vm1")
	if err := d.Start(ctx, "vm1", vz.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Version(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Version with no lume command: %v; want unsupported", err)
	}
	d.Binary = cli
	if v, err := d.Version(ctx); err != nil || v != "0.5.3" {
		t.Fatalf("Version from lume --version: %q, %v; want 0.5.3", v, err)
	}
	d.Binary, d.GuestUser, d.GuestPassword = cli, "admin", "wrong"
	if err := d.RequestStop(ctx, "vm1"); err == nil || !strings.Contains(err.Error(), "SSH authentication failed") {
		t.Fatalf("lume shutdown with a wrong password: %v; want lume's words", err)
	}
	d.GuestPassword = "s3cret"
	if err := d.RequestStop(ctx, "vm1"); err != nil {
		t.Fatal(err)
	}
	if s := state(t, d, "vm1"); s != vz.StateStopped || fake.SSHShutdowns() != 1 || fake.ForcedStops() != 0 {
		t.Fatalf("after lume shutdown: %s, %d shut down from inside, %d forced; want Stopped, 1, 0", s, fake.SSHShutdowns(), fake.ForcedStops())
	}
	mustErr(t, d.RequestStop(ctx, "vm1"), vz.ErrNotRunning)
	d.Binary = ""
	if err := d.Start(ctx, "vm1", vz.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	mustErr(t, d.RequestStop(ctx, "vm1"), vz.ErrNoGracefulStop)
}

// lume has no saved state: a Suspendable start is a plain one, and
// Suspend leaves the VM running.
func TestNoSuspend(t *testing.T) {
	d, _ := setup(t, fakelume.Options{})
	ctx := context.Background()
	mustErr(t, d.CanSuspend(ctx), errors.ErrUnsupported)
	create(t, d, "vm1")
	if err := d.Start(ctx, "vm1", vz.StartOptions{Suspendable: true}); err != nil {
		t.Fatal(err)
	}
	mustErr(t, d.Suspend(ctx, "vm1"), errors.ErrUnsupported)
	if s := state(t, d, "vm1"); s != vz.StateRunning {
		t.Fatalf("after Suspend: %s; want Running", s)
	}
}
