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

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/hostagent"
	"github.com/macvirt/macvirt/internal/hostagent/vz/tart"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

// MacsOptions say which fake Apple-silicon Macs to run.
type MacsOptions struct {
	// Names are the Macs' (and their MacHosts') names.
	Names []string
	// Labels go on every MacHost, for classes to select them by.
	Labels map[string]string
	// Cordoned Macs are registered unschedulable.
	Cordoned []string
	// Lease is each agent's lease; 0: 20s.
	Lease time.Duration
	// Images are the VM images the fake tart can clone.
	Images []string
	// Dir holds the fake tart binary and each Mac's TART_HOME; it must
	// outlive the Macs.
	Dir string
}

// Macs are fake Apple-silicon hosts: for each, a MacHost, the real host
// agent with the real tart driver, and the fake tart command (built once)
// that runs each VM as a process. Every VM that runs gets a guest that
// speaks the guest agent's protocol to the operator's endpoint with the
// configuration the operator wrote for its machine, which it reads with
// the world's admin client (on a real Mac the host agent delivers it;
// docs/design/apple-silicon-runtime.md, section 7).
type Macs struct {
	cfg   *rest.Config
	admin client.Client
	opts  MacsOptions
	tart  string

	mu     sync.Mutex
	agents map[string]*macAgent
	starts int
	guests context.CancelFunc
	done   chan struct{}
}

type macAgent struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartMacs builds the fake tart, registers the Macs and starts their agents
// and guests until Stop (or ctx ends).
func StartMacs(ctx context.Context, cfg *rest.Config, admin client.Client, opts MacsOptions) (*Macs, error) {
	if opts.Lease == 0 {
		opts.Lease = 20 * time.Second
	}
	bin, err := build.To(opts.Dir)
	if err != nil {
		return nil, err
	}
	m := &Macs{cfg: cfg, admin: admin, opts: opts, tart: bin, agents: map[string]*macAgent{}, done: make(chan struct{})}
	for _, name := range opts.Names {
		if err := os.MkdirAll(m.Home(name), 0o700); err != nil {
			return nil, err
		}
		if err := build.WriteKnobs(m.Home(name), build.Knobs{Images: opts.Images, ShutdownDelayMillis: 300}); err != nil {
			return nil, err
		}
		h := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: opts.Labels}}
		for _, c := range opts.Cordoned {
			h.Spec.Unschedulable = h.Spec.Unschedulable || c == name
		}
		if err := admin.Create(ctx, h); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("registering MacHost %s: %w", name, err)
		}
		if err := m.Start(ctx, name); err != nil {
			m.Stop()
			return nil, err
		}
	}
	gctx, cancel := context.WithCancel(ctx)
	m.guests = cancel
	go func() {
		defer close(m.done)
		runHostedGuests(gctx, admin, opts.Names)
	}()
	return m, nil
}

// Home is a Mac's TART_HOME.
func (m *Macs) Home(name string) string { return filepath.Join(m.opts.Dir, name, "tart-home") }

// driver is a tart driver for the Mac.
func (m *Macs) driver(name string) *tart.Driver {
	d := tart.New(m.tart, filepath.Join(m.opts.Dir, name, "agent-state"))
	d.Env = []string{"TART_HOME=" + m.Home(name)}
	d.StartTimeout = time.Minute
	return d
}

// Start starts a Mac's agent (again, after Halt).
func (m *Macs) Start(ctx context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.agents[name] != nil {
		return fmt.Errorf("the agent of %s runs", name)
	}
	m.starts++
	a, err := hostagent.New(m.cfg, m.driver(name), hostagent.Options{Host: name, Lease: m.opts.Lease, Version: "harness",
		StateDir: filepath.Join(m.opts.Dir, name, "agent"),
		Name:     fmt.Sprintf("%s-%d", name, m.starts)})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	run := &macAgent{cancel: cancel, done: make(chan struct{})}
	m.agents[name] = run
	go func() {
		defer close(run.done)
		if err := a.Start(actx); err != nil {
			ctrl.Log.Error(err, "fake Mac's host agent stopped", "host", name)
		}
	}()
	return nil
}

// Halt stops a Mac's agent, as a Mac that loses power or its network stops
// heartbeating; its VMs run on.
func (m *Macs) Halt(name string) {
	m.mu.Lock()
	run := m.agents[name]
	delete(m.agents, name)
	m.mu.Unlock()
	if run != nil {
		run.cancel()
		<-run.done
	}
}

// Running is how many VMs a Mac's tart runs.
func (m *Macs) Running(ctx context.Context, name string) (int, error) {
	s, err := m.driver(name).Slots(ctx)
	return s.Running, err
}

// Stop stops the agents and guests, and kills every fake VM left.
func (m *Macs) Stop() {
	for _, name := range m.opts.Names {
		m.Halt(name)
	}
	if m.guests != nil {
		m.guests()
		<-m.done
	}
	for _, name := range m.opts.Names {
		build.KillAll(m.Home(name))
	}
}

// runHostedGuests gives every running VM on the hosts a guest, and ends a
// guest whose VM stopped or whose boot (runningSince) is another.
func runHostedGuests(ctx context.Context, admin client.Client, hosts []string) {
	on := map[string]bool{}
	for _, h := range hosts {
		on[h] = true
	}
	type guest struct {
		boot   time.Time
		cancel context.CancelFunc
	}
	running := map[types.UID]guest{}
	defer func() {
		for _, g := range running {
			g.cancel()
		}
	}()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		list := &macvirtv1alpha1.MacMachineList{}
		if err := admin.List(ctx, list); err == nil {
			seen := map[types.UID]bool{}
			for i := range list.Items {
				mm := &list.Items[i]
				hv := mm.Status.Host
				if !on[mm.Spec.HostName] || hv == nil || hv.State != macvirtv1alpha1.HostVMRunning || hv.RunningSince == nil {
					continue
				}
				seen[mm.UID] = true
				if g, ok := running[mm.UID]; ok && g.boot.Equal(hv.RunningSince.Time) {
					continue
				} else if ok {
					g.cancel()
				}
				gctx, cancel := context.WithCancel(ctx)
				running[mm.UID] = guest{boot: hv.RunningSince.Time, cancel: cancel}
				go hostedGuest(gctx, admin, mm.DeepCopy())
			}
			for uid, g := range running {
				if !seen[uid] {
					g.cancel()
					delete(running, uid)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// hostedGuest heartbeats for one VM with the real agent's client, as
// macOS's guest agent does, until ctx ends.
func hostedGuest(ctx context.Context, admin client.Client, m *macvirtv1alpha1.MacMachine) {
	log := ctrl.Log.WithName("fake-mac-guest").WithValues("machine", client.ObjectKeyFromObject(m))
	var c *guestagent.Client
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if c == nil {
			cfg, err := hostedGuestConfig(ctx, admin, m)
			if err == nil {
				c, err = guestagent.NewClient(cfg)
			}
			if err != nil {
				log.Info("no agent configuration yet", "error", err.Error())
				continue
			}
		}
		facts := guestagent.Facts{OSVersion: "15.5", OSBuild: "24F74", Hostname: m.Status.Host.VMName, BootTime: m.Status.Host.RunningSince.UTC()}
		if a := m.Status.Host.Address; a != "" {
			facts.IPAddresses = []string{a}
		}
		state, err := c.Heartbeat(ctx, facts)
		var se *guestagent.StatusError
		switch {
		case errors.As(err, &se) && se.Code == 401:
			c = nil // a new token: read the configuration again.
		case err != nil:
			log.Info("heartbeat failed", "error", err.Error())
		default:
			wait = time.Duration(max(state.HeartbeatIntervalSeconds, 1)) * time.Second
		}
	}
}

// hostedGuestConfig reads the agent configuration the operator wrote for the
// machine.
func hostedGuestConfig(ctx context.Context, admin client.Client, m *macvirtv1alpha1.MacMachine) (*guestagent.Config, error) {
	cur := &macvirtv1alpha1.MacMachine{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if err := admin.Get(ctx, types.NamespacedName{Namespace: cur.Namespace, Name: render.AgentSecretName(cur)}, s); err != nil {
		return nil, err
	}
	d := s.Data
	return &guestagent.Config{Endpoint: string(d[guestprotocol.KeyEndpoint]), CABundle: d[guestprotocol.KeyCABundle], Token: string(d[guestprotocol.KeyToken]),
		Namespace: string(d[guestprotocol.KeyNamespace]), Machine: string(d[guestprotocol.KeyMachine])}, nil
}
