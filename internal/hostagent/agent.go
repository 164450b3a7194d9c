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
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/source"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

// Facts are what the agent reports about its Mac besides its VMs.
type Facts struct {
	Chip, MacOSVersion string
	// FreeDisk is the free space where the tool keeps its VMs; nil when
	// unknown.
	FreeDisk *resource.Quantity
	// DHCPLease is how long the Mac's DHCP server leases a VM its address,
	// and DHCPLeaseSource where that was read; 0 when unknown.
	DHCPLease       time.Duration
	DHCPLeaseSource string
	// User is the user the agent (and so the tool) runs as; ConsoleUser
	// who is logged in at the Mac's screen ("root" at the login window;
	// empty when not read); AutoLoginUser whom macOS logs in after a
	// reboot.
	User, ConsoleUser, AutoLoginUser string
	// HVSupport is sysctl kern.hv_support ("1" where VMs run).
	HVSupport string
}

// Options configure an agent.
type Options struct {
	// Host is the MacHost's name: the Mac's, and the agent's
	// ServiceAccount's.
	Host string
	// Lease is how long the host counts as alive after a heartbeat; the
	// agent heartbeats four times per lease. Unset: 60s.
	Lease time.Duration
	// MinFreeDisk is the free disk under which the host reports
	// DiskPressure. Unset: 60Gi.
	MinFreeDisk *resource.Quantity
	// Version is the agent's version, reported.
	Version string
	// Facts reads the Mac's chip, macOS version and free disk; unset,
	// nothing is reported of them.
	Facts func(ctx context.Context) Facts
	// StateDir keeps the agent's own records: the VMs it made, the only
	// ones it ever removes on its own. Required.
	StateDir string
	// Clock is the agent's time source (tests move it).
	Clock clock.PassiveClock
	// Name tells several agents apart in one process (tests).
	Name string
	// Endpoint is where each VM's configuration is fetched. Required.
	Endpoint *Endpoint
	// MaxPulls is how many images the agent pulls at once; a VM of a
	// cached image is made at once whatever runs. Unset: DefaultMaxPulls.
	MaxPulls int
	// Workers is how many machines the agent works on at once. Unset: 4.
	Workers int
	// DialGuest connects to a port of a guest on the Mac's NAT network, for
	// a tenant's tunnel; a net.Dialer when nil (tests map guests'
	// addresses to where their fakes listen).
	DialGuest func(ctx context.Context, network, address string) (net.Conn, error)
}

// Agent is one Mac's host agent.
type Agent struct {
	opts   Options
	driver vz.Driver
	client client.Client
	// reader reads from the API server, uncached.
	reader client.Reader
	clock  clock.PassiveClock
	mgr    manager.Manager
	// endpoint fetches configurations from the operator.
	endpoint *http.Client

	mu sync.Mutex
	// stuck is the VM-limit error of the last start, when it came with no
	// VM running; cleared by the next start that succeeds.
	stuck string
	// unused are the VMs whose fetched configuration no start has used
	// yet: a start that failed (the VM limit, say) is retried with it,
	// rather than drawing the machine a new token (and Secret) each time.
	unused map[string]string
	// stopWarnings are, by VM, what the tool said when its own request to
	// shut down failed while the share's reached the guest agent: shown in
	// status.host.error while the VM is waited for, since a guest agent
	// that never answers leaves only the tool's words to act on.
	stopWarnings map[string]string
	// creations are the VMs being made beside the machine loop.
	creations *creations
	// refreshFailures are, by image, the last scheduled refreshes that
	// failed (image.refresh).
	refreshFailures map[string]error
	// resumeFailures counts, by VM, the resumes in a row the tool failed
	// for another reason than the VM limit.
	resumeFailures map[string]int
	// tunnelSlots holds a token per tunnel the agent carries.
	tunnelSlots chan struct{}
	// facts and toolVersion are what heartbeats last read of the Mac.
	facts       cached[Facts]
	toolVersion cached[string]
}

// New makes an agent that talks to the API server with cfg (the host's
// ServiceAccount) and drives VMs with driver.
func New(cfg *rest.Config, driver vz.Driver, opts Options) (*Agent, error) {
	if opts.Host == "" {
		return nil, errors.New("the host's name is required")
	}
	if opts.StateDir == "" {
		return nil, errors.New("the agent's state directory is required")
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, madeDir), 0o700); err != nil {
		return nil, fmt.Errorf("making the agent's state directory: %w", err)
	}
	endpoint, err := newEndpointClient(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	if opts.Lease == 0 {
		opts.Lease = macvirtv1alpha1.DefaultHostLease
	}
	if opts.MinFreeDisk == nil {
		q := resource.MustParse("60Gi")
		opts.MinFreeDisk = &q
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	scheme, err := macvirtscheme.New()
	if err != nil {
		return nil, err
	}
	// The agent caches only its own machines (a field selector, served for
	// .spec.hostName as a selectable field) and the classes; it reads its
	// MacHost uncached.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&macvirtv1alpha1.MacMachine{}: {Field: fields.OneTermEqualSelector("spec.hostName", opts.Host)},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("making the agent's manager: %w", err)
	}
	a := &Agent{opts: opts, driver: driver, client: mgr.GetClient(), reader: mgr.GetAPIReader(), clock: opts.Clock, mgr: mgr,
		endpoint: endpoint, unused: map[string]string{}, stopWarnings: map[string]string{}, creations: newCreations(opts.MaxPulls, opts.Clock),
		tunnelSlots: make(chan struct{}, maxTunnels), refreshFailures: map[string]error{}, resumeFailures: map[string]int{}}
	name := "hostagent"
	if opts.Name != "" {
		name += "-" + opts.Name
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacMachine{}).
		// A creation that ends wakes its machine; a long start (tart
		// waits for the VM to run) holds one worker of several, so it
		// delays no stop.
		WatchesRawSource(source.Channel(a.creations.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		Named(name).
		Complete(&machineReconciler{agent: a})
	if err != nil {
		return nil, fmt.Errorf("setting up the agent's machine loop: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(a.keepHost)); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(a.holdTunnels)); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(a.refreshImages)); err != nil {
		return nil, err
	}
	return a, nil
}

// Start runs the agent until ctx ends.
func (a *Agent) Start(ctx context.Context) error { return a.mgr.Start(ctx) }

// start starts machine m's VM with the configuration of this start shared
// into it, and tells the framework's VM limit with no VM running (the
// stuck count) from a host that is only full.
func (a *Agent) start(ctx context.Context, m *macvirtv1alpha1.MacMachine, name string, mode startMode) error {
	a.mu.Lock()
	dir := a.unused[name]
	a.mu.Unlock()
	if dir == "" {
		var err error
		if dir, err = a.configure(ctx, m, name); err != nil {
			return err
		}
		a.mu.Lock()
		a.unused[name] = dir
		a.mu.Unlock()
	}
	if mode.resume || mode.renew {
		if err := writeResumed(dir, mode.resumedAt); err != nil {
			return err
		}
	}
	if err := a.markSuspendable(name, mode.suspendable); err != nil {
		return fmt.Errorf("recording that the VM starts suspendable: %w", err)
	}
	err := a.driver.Start(ctx, name, vz.StartOptions{ConfigDir: dir, Suspendable: mode.suspendable})
	if err != nil {
		err = &toolStartError{err}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil || errors.Is(err, vz.ErrAlreadyRunning) {
		delete(a.unused, name)
	}
	switch {
	case err == nil:
		a.stuck = ""
	case errors.Is(err, vz.ErrVMLimit):
		if s, serr := a.driver.Slots(ctx); serr == nil && s.Running == 0 {
			a.stuck = fmt.Sprintf("starting %s failed at %s with no VM running: %v", name, a.clock.Now().UTC().Format(time.RFC3339), err)
		}
	}
	return err
}

// toolStartError is a start the tool refused (not the configuration's
// fetch before it).
type toolStartError struct{ error }

func (e *toolStartError) Unwrap() error { return e.error }

// startMode says how a VM starts.
type startMode struct {
	// suspendable: it may be suspended later (an idle machine of a
	// suspended pool); resume: it is restored from its saved state.
	suspendable, resume bool
	// renew: a cold boot whose guest renews its identity as a resumed one
	// does (its saved state was dropped).
	renew bool
	// resumedAt is when the resume began, as status.host.resumedAt says.
	resumedAt time.Time
}

// stuckCount is the last stuck-count failure, or "".
func (a *Agent) stuckCount() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stuck
}

// uidPattern is a Kubernetes UID, as VMName puts one after VMPrefix.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// madeDir, under the state directory, holds an empty file per VM the
// agent made, written before the VM is.
const madeDir = "made"

// recordMade notes that the agent makes the VM name.
func (a *Agent) recordMade(name string) error {
	return os.WriteFile(filepath.Join(a.opts.StateDir, madeDir, name), nil, 0o600)
}

// forgetMade drops the note, and the VM's configuration, once the VM is
// gone.
func (a *Agent) forgetMade(name string) {
	_ = os.Remove(filepath.Join(a.opts.StateDir, madeDir, name))
	a.forgetConfig(name)
	a.mu.Lock()
	delete(a.unused, name)
	delete(a.stopWarnings, name)
	a.mu.Unlock()
}

// made says whether the agent made the VM name.
func (a *Agent) made(name string) bool {
	_, err := os.Stat(filepath.Join(a.opts.StateDir, madeDir, name))
	return err == nil
}

// orphans returns the VMs the agent made whose machine no longer exists
// anywhere in the cluster: left by a machine deleted while the Mac was
// lost. A VM the agent did not make (a user's, even named like its own),
// and one whose machine exists (on any host, placed or not) is never one.
func (a *Agent) orphans(ctx context.Context) ([]string, error) {
	vms, err := a.driver.List(ctx)
	if err != nil {
		return nil, err
	}
	var candidates []string
	for _, vm := range vms {
		uid, ok := strings.CutPrefix(vm.Name, VMPrefix)
		if ok && uidPattern.MatchString(uid) && a.made(vm.Name) {
			candidates = append(candidates, vm.Name)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	// Read from the API server, all machines: not the agent's cache, which
	// holds only those placed here.
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(macvirtv1alpha1.GroupVersion.WithKind("MacMachineList"))
	if err := a.reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing machines to find orphaned VMs: %w", err)
	}
	exists := map[string]bool{}
	for i := range list.Items {
		exists[VMPrefix+string(list.Items[i].UID)] = true
	}
	var out []string
	for _, name := range candidates {
		if !exists[name] {
			out = append(out, name)
		}
	}
	return out, nil
}
