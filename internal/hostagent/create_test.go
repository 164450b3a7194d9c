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

package hostagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// gateDriver makes VMs only when the test lets each one through.
type gateDriver struct {
	vz.Driver
	mu      sync.Mutex
	gates   map[string]chan error
	entered chan string
}

func newGateDriver() *gateDriver {
	return &gateDriver{gates: map[string]chan error{}, entered: make(chan string, 16)}
}

func (d *gateDriver) gate(name string) chan error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gates[name] == nil {
		d.gates[name] = make(chan error, 1)
	}
	return d.gates[name]
}

func (d *gateDriver) ImageDigest(context.Context, string) (string, error) { return "sha256:0", nil }

func (d *gateDriver) Suspend(context.Context, string) error { return errors.ErrUnsupported }

func (d *gateDriver) CanSuspend(context.Context) error { return errors.ErrUnsupported }

func (d *gateDriver) DiscardSavedState(context.Context, string) error { return nil }

func (d *gateDriver) Create(ctx context.Context, name string, opts vz.CreateOptions) error {
	d.entered <- name
	opts.Progress(vz.PullProgress{TotalBytes: 40e9, CompletedBytes: 4e9})
	select {
	case err := <-d.gate(name):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// entered waits for the driver to be asked to make name.
func (d *gateDriver) waitEntered(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-d.entered:
		if got != name {
			t.Fatalf("the driver was asked to make %s; want %s", got, name)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the driver was never asked to make %s", name)
	}
}

func (d *gateDriver) notEntered(t *testing.T) {
	t.Helper()
	select {
	case got := <-d.entered:
		t.Fatalf("the driver was asked to make %s, past the pull limit", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func waitDone(t *testing.T, c *creations, name string) createView {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, ok := c.view(name)
		if !ok || !v.Running {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("the creation of %s did not end", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Pulls beyond the host's limit wait, queued, and a VM of a cached image
// never does; a creation given up ends at once, and a failed one is kept
// for the loop to report.
func TestCreationsLimitPullsButNeverACachedImage(t *testing.T) {
	d := newGateDriver()
	c := newCreations(1, clock.RealClock{})
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "macvirt-pools", Name: "m"}

	c.begin(ctx, d, "pull-1", vz.CreateOptions{Image: "ghcr.io/a/xcode:26"}, false, key)
	d.waitEntered(t, "pull-1")
	if v, _ := c.view("pull-1"); !v.Running || v.Queued || v.Progress.CompletedBytes != 4e9 {
		t.Fatalf("the first pull: %+v; want it running, not queued, with its progress", v)
	}
	c.begin(ctx, d, "pull-2", vz.CreateOptions{Image: "ghcr.io/a/xcode:26"}, false, key)
	d.notEntered(t)
	if v, _ := c.view("pull-2"); !v.Running || !v.Queued {
		t.Fatalf("the second pull: %+v; want it queued behind the host's one pull", v)
	}
	c.begin(ctx, d, "cached", vz.CreateOptions{Image: "ghcr.io/a/base:latest"}, true, key)
	d.waitEntered(t, "cached")
	d.gate("cached") <- nil
	if v := waitDone(t, c, "cached"); v.Err != nil {
		t.Fatalf("the cached image's VM: %v", v.Err)
	}
	if _, ok := c.view("cached"); ok {
		t.Fatal("a creation that succeeded is still recorded once read")
	}

	// A creation under way is not begun twice.
	c.begin(ctx, d, "pull-1", vz.CreateOptions{Image: "ghcr.io/a/xcode:26"}, false, key)
	d.notEntered(t)

	c.cancel("pull-2")
	if v := waitDone(t, c, "pull-2"); !errors.Is(v.Err, context.Canceled) {
		t.Fatalf("the queued pull given up: %v; want context.Canceled", v.Err)
	}
	d.gate("pull-1") <- errors.New("tart exited 1: no space left on device")
	if v := waitDone(t, c, "pull-1"); v.Err == nil || v.FinishedAt.IsZero() {
		t.Fatalf("the failed pull: %+v; want its error and when", v)
	}
	if _, ok := c.view("pull-1"); !ok {
		t.Fatal("a failed creation is forgotten before the loop reported it")
	}
	c.forget("pull-1")
	if _, ok := c.view("pull-1"); ok {
		t.Fatal("a reported failure is still recorded after forget")
	}
	wakes := len(c.wake)
	if wakes != 3 {
		t.Fatalf("%d wakes; want one per creation that ended (3)", wakes)
	}
}
