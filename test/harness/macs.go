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
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/hostagent"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
	"github.com/macvirt/macvirt/internal/hostagent/vz/tart"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
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
	// Endpoint is the operator's agent endpoint (System.AgentEndpoint) and
	// CABundle its CA: where the host agents fetch each VM's
	// configuration. Required.
	Endpoint string
	CABundle []byte
	// GuestFiles are the golden image's files on every VM's disk
	// (World.Simulator.GuestFiles: the world's CI agents among them).
	GuestFiles map[string]simulator.GuestFile
}

// Macs are fake Apple-silicon hosts: for each, a MacHost, the real host
// agent with the real tart driver, as the Mac's ServiceAccount in
// macvirt-hosts under the shipped role, and the fake tart command (built
// once) that runs each VM as a process. Every VM that runs gets a guest
// that speaks the guest agent's protocol to the operator's endpoint with
// the configuration it finds where macOS shows it: the share the host
// agent gave the VM, which the fake tart lays out as tart's --dir does
// (docs/design/apple-silicon-runtime.md, section 7).
type Macs struct {
	cfg   *rest.Config
	admin client.Client
	opts  MacsOptions
	tart  string

	// configs are the Macs' connections, each as its ServiceAccount, and
	// tokens their ServiceAccount tokens.
	configs map[string]*rest.Config
	tokens  map[string]string

	mu     sync.Mutex
	agents map[string]*macAgent
	// sshd are the fake guests' sshd listeners, by host and the guest's
	// address on that Mac's NAT network: where the Mac's agent connects a
	// tenant's tunnel.
	sshd   map[string]string
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
	if opts.Endpoint == "" || len(opts.CABundle) == 0 {
		return nil, errors.New("harness: MacsOptions.Endpoint and CABundle are required: the host agents fetch each VM's configuration there")
	}
	bin, err := build.To(opts.Dir)
	if err != nil {
		return nil, err
	}
	m := &Macs{cfg: cfg, admin: admin, opts: opts, tart: bin, agents: map[string]*macAgent{}, done: make(chan struct{}), sshd: map[string]string{},
		configs: map[string]*rest.Config{}, tokens: map[string]string{}}
	if err := m.hostIdentities(ctx); err != nil {
		return nil, err
	}
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
		m.runHostedGuests(gctx)
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
	token := m.tokens[name]
	a, err := hostagent.New(m.configs[name], m.driver(name), hostagent.Options{Host: name, Lease: m.opts.Lease, Version: "harness",
		StateDir: filepath.Join(m.opts.Dir, name, "agent"),
		Name:     fmt.Sprintf("%s-%d", name, m.starts),
		Endpoint: &hostagent.Endpoint{URL: m.opts.Endpoint, CABundle: m.opts.CABundle,
			Token: func() (string, error) { return token, nil }},
		DialGuest: func(ctx context.Context, network, address string) (net.Conn, error) {
			return m.dialGuest(ctx, name, network, address)
		}})
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

// dialGuest connects, as host's agent, to a guest's port on the Mac's NAT
// network: the fake guests listen on the loopback, and only their sshd
// (port 22) is there; any other address is refused, as a guest with
// nothing listening refuses.
func (m *Macs) dialGuest(ctx context.Context, host, network, address string) (net.Conn, error) {
	m.mu.Lock()
	local := m.sshd[host+"/"+address]
	m.mu.Unlock()
	if local == "" {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused")}
	}
	return (&net.Dialer{}).DialContext(ctx, network, local)
}

// guestListens records (or, with local empty, forgets) a fake guest's sshd.
func (m *Macs) guestListens(host, address, local string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := host + "/" + net.JoinHostPort(address, "22")
	if local == "" {
		delete(m.sshd, key)
		return
	}
	m.sshd[key] = local
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

// VMs are the names of a Mac's VMs, running or not.
func (m *Macs) VMs(ctx context.Context, name string) ([]string, error) {
	vms, err := m.driver(name).List(ctx)
	out := make([]string, 0, len(vms))
	for _, vm := range vms {
		out = append(out, vm.Name)
	}
	return out, err
}

// RunningVMs are a Mac's running VMs as its tart driver reports them (name,
// state, address, MAC).
func (m *Macs) RunningVMs(ctx context.Context, name string) ([]vz.VM, error) {
	vms, err := m.driver(name).List(ctx)
	if err != nil {
		return nil, err
	}
	var out []vz.VM
	for _, vm := range vms {
		if vm.State == vz.StateRunning {
			out = append(out, vm)
		}
	}
	return out, nil
}

// Serial is the serial number the fake tart gave a VM of a Mac.
func (m *Macs) Serial(name, vm string) string { return build.Serial(m.Home(name), vm) }

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

// hostIdentities gives each Mac its ServiceAccount in macvirt-hosts, under
// config/rbac's host-agent role as shipped, and a token of it, as an admin
// does by hand (docs/apple-silicon-hosts.md).
func (m *Macs) hostIdentities(ctx context.Context) error {
	if err := createIfMissing(ctx, m.admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: macvirtv1alpha1.HostAgentNamespace}}); err != nil {
		return err
	}
	objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", "host_agent_role.yaml"), m.admin.Scheme())
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := createIfMissing(ctx, m.admin, o); err != nil {
			return err
		}
	}
	cs, err := kubernetes.NewForConfig(m.cfg)
	if err != nil {
		return err
	}
	for _, name := range m.opts.Names {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: macvirtv1alpha1.HostAgentNamespace, Name: name}}
		if err := createIfMissing(ctx, m.admin, sa); err != nil {
			return err
		}
		tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("a token of the ServiceAccount %s/%s: %w", sa.Namespace, name, err)
		}
		m.tokens[name] = tr.Status.Token
		m.configs[name] = &rest.Config{Host: m.cfg.Host, BearerToken: tr.Status.Token,
			TLSClientConfig: rest.TLSClientConfig{CAData: m.cfg.CAData, CAFile: m.cfg.CAFile}}
	}
	return nil
}

// runHostedGuests gives every running VM on the Macs a guest, and ends a
// guest whose VM stopped or whose boot (the fake tart's boot id) is
// another. A suspended VM's guest is kept, frozen, and thaws with the
// memory it had when its VM is resumed, as a restored macOS does.
func (m *Macs) runHostedGuests(ctx context.Context) {
	on := map[string]bool{}
	for _, h := range m.opts.Names {
		on[h] = true
	}
	type guest struct {
		boot   string
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
		m.haltAskedGuests()
		list := &macvirtv1alpha1.MacMachineList{}
		if err := m.admin.List(ctx, list); err == nil {
			seen := map[types.UID]bool{}
			for i := range list.Items {
				mm := &list.Items[i]
				hv := mm.Status.Host
				if !on[mm.Spec.HostName] || hv == nil {
					continue
				}
				home := m.Home(mm.Spec.HostName)
				boot := build.BootID(home, hv.VMName)
				if g, ok := running[mm.UID]; ok && boot != "" && g.boot == boot && hv.State != macvirtv1alpha1.HostVMStopped {
					// The same boot: running, or frozen while suspended.
					seen[mm.UID] = true
					continue
				}
				if hv.State != macvirtv1alpha1.HostVMRunning || hv.RunningSince == nil || boot == "" {
					continue
				}
				seen[mm.UID] = true
				if g, ok := running[mm.UID]; ok {
					g.cancel()
				}
				gctx, cancel := context.WithCancel(ctx)
				running[mm.UID] = guest{boot: boot, cancel: cancel}
				go m.hostedGuest(gctx, home, hv.VMName, mm.DeepCopy())
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

// haltAskedGuests plays, for every VM on the Macs (a machine's or an
// orphan), its guest agent's watch for the host's shutdown request: where
// the share holds it (guestagent.ShutdownRequested), macOS is shut down
// from inside. The VM's power button alone only opens macOS's dialog.
func (m *Macs) haltAskedGuests() {
	for _, host := range m.opts.Names {
		entries, err := os.ReadDir(filepath.Join(m.Home(host), "vms"))
		if err != nil {
			continue
		}
		for _, e := range entries {
			dir, err := guestagent.ConfigDirUnder(build.GuestRoot(m.Home(host), e.Name()))
			if err == nil && guestagent.ShutdownRequested(dir) {
				if err := build.HaltGuest(m.Home(host), e.Name()); err != nil {
					ctrl.Log.WithName("fake-mac-guest").Info("halting a guest failed", "vm", e.Name(), "error", err.Error())
				}
			}
		}
	}
}

// hostedGuest heartbeats for one VM with the real agent's client, as
// macOS's guest agent does, until ctx ends. It finds its configuration
// under root, the VM's guest root, where the real agent looks in macOS,
// and runs the tasks the operator hands it with the real agent's task
// runner on the VM's disk (root), which holds the golden image's files.
// Its sshd (the simulator's stand-in) answers at the VM's address on the
// Mac's NAT network from its first heartbeat on, with the disk's host key
// and the keys the operator sent.
func (m *Macs) hostedGuest(ctx context.Context, home, vm string, mm *macvirtv1alpha1.MacMachine) {
	root := build.GuestRoot(home, vm)
	log := ctrl.Log.WithName("fake-mac-guest").WithValues("machine", client.ObjectKeyFromObject(mm))
	disk, err := simulator.NewGuestDisk(root, m.opts.GuestFiles)
	if err != nil {
		log.Error(err, "the fake Mac's guest has no disk")
		return
	}
	speaker := &guestagent.Speaker{Tasks: &guestagent.Tasks{Dir: disk.TaskDir(), Host: disk,
		Logf: func(f string, args ...any) { log.V(1).Info(fmt.Sprintf(f, args...)) }}}
	// The VM's processes end with it.
	defer speaker.Tasks.Stop()
	defer speaker.Stop()
	host, address := mm.Spec.HostName, mm.Status.Host.Address
	var sshd *simulator.GuestSSH
	defer func() {
		if sshd != nil {
			m.guestListens(host, address, "")
		}
	}()
	var c *guestagent.Client
	wait := time.Second
	// runs says whether the VM runs (its tart run holds its lock): a
	// suspended VM's guest does nothing until it is resumed.
	runs := func() bool { return build.LockOwner(filepath.Join(home, "vms", vm, "config.json")) > 0 }
	// stamp is the share's resumed file, which the real agent watches
	// (guestagent.WatchResume): a resume wakes the guest at once.
	stamp := func() string {
		dir, _ := guestagent.ConfigDirUnder(root)
		return guestagent.ResumedStamp(dir)
	}
	for {
		due, seen := time.Now().Add(wait), stamp()
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-speaker.Changed():
				waiting = false
			case <-speaker.Pushed():
				waiting = false
			case <-time.After(100 * time.Millisecond):
				waiting = time.Now().Before(due) && stamp() == seen
			}
		}
		if !runs() {
			wait = 100 * time.Millisecond
			continue
		}
		// The real agent's resume: new host keys on the disk (the fake
		// sshd reads them per connection) and the new token.
		if dir, err := guestagent.ConfigDirUnder(root); err == nil && dir != "" {
			renewed, err := guestagent.RenewAfterResume(nil, disk, filepath.Dir(disk.TaskDir()), dir,
				func(f string, args ...any) { log.Info(fmt.Sprintf(f, args...)) })
			if err != nil {
				log.Error(err, "renewing a resumed guest")
			}
			if renewed {
				c = nil
			}
		}
		if c == nil {
			dir, err := guestagent.ConfigDirUnder(root)
			if err == nil && dir == "" {
				err = errors.New("no configuration shared into the VM")
			}
			var cfg *guestagent.Config
			if err == nil {
				cfg, err = guestagent.ReadConfig(dir)
			}
			if err == nil {
				c, err = guestagent.NewClient(cfg)
			}
			if err != nil {
				log.Info("no agent configuration yet", "error", err.Error())
				continue
			}
		}
		hostname := mm.Status.Host.VMName
		facts := guestagent.Facts{OSVersion: "15.5", OSBuild: "24F74", Hostname: hostname, BootTime: mm.Status.Host.RunningSince.UTC(),
			SSHHostKeys: simulator.GuestHostKeys(disk)}
		if address != "" {
			facts.IPAddresses = []string{address}
		}
		state, err := speaker.Heartbeat(ctx, c, facts)
		var se *guestagent.StatusError
		switch {
		case errors.As(err, &se) && se.Code == 401:
			c = nil // a new token: read the configuration again.
		case err != nil:
			log.Info("heartbeat failed", "error", err.Error())
		default:
			wait = time.Duration(max(state.HeartbeatIntervalSeconds, 1)) * time.Second
			if sshd == nil && address != "" {
				if sshd, err = simulator.ServeGuestSSH(ctx, disk); err != nil {
					log.Error(err, "the fake guest's sshd did not start")
				} else {
					m.guestListens(host, address, sshd.Addr)
				}
			}
			if sshd != nil {
				sshd.Update(*state, hostname)
			}
		}
	}
}
