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
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// DefaultMaxPulls is how many images a host agent pulls at once when not
// told: a Mac's link and disk are shared by every pull, and tart pulls
// from one registry one at a time whatever the agent does.
const DefaultMaxPulls = 2

// createRetry is how long after a failed create the agent tries again.
const createRetry = 10 * time.Second

// creation is one VM being made (its image pulled, when the host has not
// cached it) beside the agent's machine loop, which only reads it: a
// pull of hours holds no worker, so it delays no stop or start.
type creation struct {
	image     string
	startedAt time.Time
	cancel    context.CancelFunc

	// Under creations.mu.
	queued     bool
	progress   vz.PullProgress
	done       bool
	err        error
	finishedAt time.Time
	// digest is what the image resolved to, when the tool says.
	digest string
}

// creations are the host's VMs being made, by VM name.
type creations struct {
	mu  sync.Mutex
	ops map[string]*creation
	// pulls holds a token per pull of an image the host has not cached.
	pulls chan struct{}
	// wake tells the machine loop that a creation ended.
	wake  chan event.GenericEvent
	clock clock.PassiveClock
}

func newCreations(maxPulls int, clk clock.PassiveClock) *creations {
	if maxPulls <= 0 {
		maxPulls = DefaultMaxPulls
	}
	return &creations{ops: map[string]*creation{}, pulls: make(chan struct{}, maxPulls),
		wake: make(chan event.GenericEvent, 64), clock: clk}
}

// createView is what the machine loop reads of a creation.
type createView struct {
	Running    bool
	Queued     bool
	Progress   vz.PullProgress
	Image      string
	StartedAt  time.Time
	Err        error
	FinishedAt time.Time
	// Digest is the digest the VM was made from ("" when the tool does
	// not say).
	Digest string
}

// view returns the creation of the VM name, if any; a successful one is
// forgotten once read (the VM exists, and the driver says so from then).
func (c *creations) view(name string) (createView, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := c.ops[name]
	if op == nil {
		return createView{}, false
	}
	v := createView{Running: !op.done, Queued: op.queued, Progress: op.progress, Image: op.image, StartedAt: op.startedAt,
		Err: op.err, FinishedAt: op.finishedAt, Digest: op.digest}
	if op.done && op.err == nil {
		delete(c.ops, name)
	}
	return v, true
}

// cancel gives up the creation of the VM name (its machine was deleted);
// the tool removes what it pulled, and the loop is woken when it ended.
func (c *creations) cancel(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op := c.ops[name]; op != nil && !op.done {
		op.cancel()
	}
}

// forget drops a finished creation's record (its failure was reported).
func (c *creations) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op := c.ops[name]; op != nil && op.done {
		delete(c.ops, name)
	}
}

// begin starts making the VM name beside the loop, unless it is being
// made. cached says the host has the image, so no pull token is needed;
// machine is woken in the loop when the creation ends.
func (c *creations) begin(ctx context.Context, driver vz.Driver, name string, opts vz.CreateOptions, cached bool,
	machine types.NamespacedName) {
	c.mu.Lock()
	if op := c.ops[name]; op != nil && !op.done {
		c.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	op := &creation{image: opts.Image, startedAt: c.clock.Now(), cancel: cancel, queued: !cached}
	c.ops[name] = op
	c.mu.Unlock()
	opts.Progress = func(p vz.PullProgress) {
		c.mu.Lock()
		op.progress = p
		c.mu.Unlock()
	}
	go func() {
		defer cancel()
		err := c.create(ctx, driver, name, opts, cached, op)
		digest := ""
		if err == nil {
			digest, _ = driver.ImageDigest(ctx, opts.Image)
		}
		c.mu.Lock()
		op.done, op.err, op.finishedAt, op.queued, op.digest = true, err, c.clock.Now(), false, digest
		c.mu.Unlock()
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Name}}
		select {
		case c.wake <- event.GenericEvent{Object: m}:
		default:
			// The loop is behind; it looks again on its own soon.
		}
	}()
}

func (c *creations) create(ctx context.Context, driver vz.Driver, name string, opts vz.CreateOptions, cached bool, op *creation) error {
	if !cached {
		select {
		case c.pulls <- struct{}{}:
			defer func() { <-c.pulls }()
		case <-ctx.Done():
			return ctx.Err()
		}
		c.mu.Lock()
		op.queued = false
		c.mu.Unlock()
	}
	return driver.Create(ctx, name, opts)
}

// cachedImage says whether the host has image, as the driver lists its
// cached images (by tag and by digest).
func cachedImage(images []string, image string) bool {
	return slices.Contains(images, image)
}

// pullStatus is what status.host.pull says of a creation under way.
func pullStatus(v createView) *macvirtv1alpha1.HostPullStatus {
	started := metav1.NewTime(v.StartedAt)
	return &macvirtv1alpha1.HostPullStatus{Image: v.Image, Queued: v.Queued, StartedAt: &started,
		TotalBytes: v.Progress.TotalBytes, CompletedBytes: v.Progress.CompletedBytes, Percent: int32(min(max(v.Progress.Percent, 0), 100))}
}
