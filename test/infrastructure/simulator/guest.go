package simulator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/macvirt/macvirt/internal/guestagent"
	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Simulated macOS guests. With Options.Guests, every Running instance that
// carries a macvirt agent config disk (a secret volume labelled
// guestprotocol.ConfigVolumeLabel) gets a guest that boots for GuestBootDelay and
// then runs the real agent's protocol code against the endpoint its config
// Secret names, until the instance stops running. So the operator sees the
// same heartbeats it would from macOS.

// guests tracks the running simulated guests.
type guests struct {
	mu      sync.Mutex
	base    context.Context
	running map[types.NamespacedName]guest
}

type guest struct {
	uid    types.UID
	cancel context.CancelFunc
}

// guestRunnable gives the guests the manager's lifetime.
type guestRunnable struct{ sim *Simulator }

func (g guestRunnable) Start(ctx context.Context) error {
	g.sim.guests.mu.Lock()
	g.sim.guests.base = ctx
	g.sim.guests.mu.Unlock()
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: guests run wherever the simulator runs.
func (g guestRunnable) NeedLeaderElection() bool { return false }

// syncGuest starts the guest of a Running instance and stops the guest of
// one that is not (any more).
func (s *Simulator) syncGuest(key types.NamespacedName, vmi *kubevirtv1.VirtualMachineInstance) {
	if !s.opts.Guests {
		return
	}
	s.guests.mu.Lock()
	defer s.guests.mu.Unlock()
	g, running := s.guests.running[key]
	wanted := s.guestListens(vmi) && configSecret(vmi) != ""
	if running && (!wanted || g.uid != vmi.UID) {
		g.cancel()
		delete(s.guests.running, key)
		running = false
	}
	if !wanted || running || s.guests.base == nil {
		return
	}
	ctx, cancel := context.WithCancel(s.guests.base)
	if s.guests.running == nil {
		s.guests.running = map[types.NamespacedName]guest{}
	}
	s.guests.running[key] = guest{uid: vmi.UID, cancel: cancel}
	go s.runGuest(ctx, vmi.DeepCopy())
}

// configSecret is the Secret of the instance's agent config disk, if any.
func configSecret(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, v := range vmi.Spec.Volumes {
		if v.Secret != nil && v.Secret.VolumeLabel == guestprotocol.ConfigVolumeLabel {
			return v.Secret.SecretName
		}
	}
	return ""
}

// runGuest boots, then heartbeats with the agent's client until ctx ends.
func (s *Simulator) runGuest(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) {
	log := ctrl.Log.WithName("sim-guest").WithValues("vmi", types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name})
	bootedAt := time.Now()
	wait := s.opts.GuestBootDelay
	failures := 0
	rebooting := false
	var client *guestagent.Client
	// A guest boots with the hostname its golden image was built with and
	// takes the one the operator sends, as the agent's apply does.
	hostname := goldenHostname
	disk, err := s.guestSystemDisk(ctx, vmi)
	if err != nil {
		log.Error(err, "simulated guest has no system disk")
		return
	}
	sshd, serving := &guestSSHD{disk: disk}, false
	// A new agent (at boot, or after a restart) finds its tasks on disk.
	newAgent := func() *guestagent.Speaker {
		return &guestagent.Speaker{Tasks: &guestagent.Tasks{Dir: disk.TaskDir(), Host: disk,
			Logf: func(f string, args ...any) { log.V(1).Info(fmt.Sprintf(f, args...)) }}}
	}
	speaker := newAgent()
	defer func() { speaker.Tasks.Stop(); speaker.Stop() }()
	restarting := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-speaker.Changed():
		case <-speaker.Pushed():
		}
		if s.hasFault(GuestReboot, vmi.Namespace, vmi.Name) {
			// Rebooting: silent until the fault is cleared, then a new boot,
			// whose processes are gone.
			speaker.Tasks.Stop()
			speaker.Stop()
			rebooting, wait = true, 100*time.Millisecond
			continue
		}
		if rebooting {
			rebooting, bootedAt, wait = false, time.Now(), s.opts.GuestBootDelay
			speaker = newAgent()
			continue
		}
		if s.hasFault(GuestAgentRestart, vmi.Namespace, vmi.Name) {
			// The agent is down; what it started runs on.
			speaker.Stop()
			restarting, wait = true, 100*time.Millisecond
			continue
		}
		if restarting {
			restarting, client = false, nil
			speaker.Tasks.Forget()
			speaker = newAgent()
		}
		err := func() error {
			if client == nil {
				cfg, err := s.guestConfig(ctx, vmi)
				if err != nil {
					return err
				}
				// The agent's first act on a cloned disk (generalize.go).
				if _, err := guestagent.Generalize(disk, disk.TaskDir(), cfg, func(f string, args ...any) { log.V(1).Info(fmt.Sprintf(f, args...)) }); err != nil {
					return err
				}
				if client, err = guestagent.NewClient(cfg); err != nil {
					return err
				}
			}
			facts := guestagent.Facts{OSVersion: "14.5", OSBuild: "23F79", Hostname: hostname, BootTime: bootedAt.UTC(),
				SSHHostKeys: guestHostKeys(disk)}
			if ip := GuestAddress(vmi); ip != "" {
				facts.IPAddresses = []string{ip}
			}
			state, err := s.heartbeat(ctx, vmi, client, speaker, facts)
			if err != nil {
				return err
			}
			if state.Hostname != "" {
				hostname = state.Hostname
			}
			sshd.update(*state, hostname)
			// The agent writes the keys into the user's authorized_keys,
			// on the disk, as apply does on a Mac.
			if u, err := disk.TaskUser(state.SSHUser); err == nil && state.SSHUser != "" {
				if err := guestagent.WriteAuthorizedKeys(filepath.Join(u.Home, ".ssh", "authorized_keys"), state.SSHAuthorizedKeys, u.UID, u.GID); err != nil {
					log.V(1).Info("simulated guest could not write authorized_keys", "error", err.Error())
				}
			}
			if s.opts.Network && !serving {
				// sshd is up once macOS has booted: the agent's first
				// heartbeat says so.
				if err := s.serveSSH(ctx, disk, podAddress(vmi), sshd); err != nil {
					log.Error(err, "simulated guest cannot serve SSH")
				} else if err := s.serveScreenSharing(ctx, podAddress(vmi)); err != nil {
					log.Error(err, "simulated guest cannot serve Screen Sharing")
				} else {
					serving = true
				}
			}
			wait = time.Duration(max(state.HeartbeatIntervalSeconds, 1)) * time.Second
			return nil
		}()
		if err != nil {
			var se *guestagent.StatusError
			if errors.As(err, &se) && se.Code == 401 {
				client = nil // the token may have been replaced
			}
			wait = guestagent.Backoff(failures, 100*time.Millisecond, 10*time.Second)
			failures++
			log.V(1).Info("simulated guest heartbeat failed", "retryIn", wait, "error", err.Error())
			continue
		}
		failures = 0
	}
}

// heartbeat sends one heartbeat as the guest's agent does: v2 with its
// tasks' reports, running what the answer hands it; v1 under GuestAgentV1.
func (s *Simulator) heartbeat(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, client *guestagent.Client, speaker *guestagent.Speaker,
	facts guestagent.Facts) (*guestprotocol.DesiredState, error) {
	if s.hasFault(GuestAgentV1, vmi.Namespace, vmi.Name) {
		return client.Heartbeat(ctx, facts)
	}
	return speaker.Heartbeat(ctx, client, facts)
}

// goldenHostname is the hostname of a simulated guest until the operator
// names it.
const goldenHostname = "macos-golden"

// guestConfig reads the config disk's Secret, as the agent reads the disk.
func (s *Simulator) guestConfig(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (*guestagent.Config, error) {
	secret := &corev1.Secret{}
	if err := s.reader.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: configSecret(vmi)}, secret); err != nil {
		return nil, err
	}
	d := secret.Data
	return &guestagent.Config{Endpoint: string(d[guestprotocol.KeyEndpoint]), CABundle: d[guestprotocol.KeyCABundle], Token: string(d[guestprotocol.KeyToken]),
		Namespace: string(d[guestprotocol.KeyNamespace]), Machine: string(d[guestprotocol.KeyMachine])}, nil
}

// guestHostKeys are the host keys on the guest's disk, as the agent reads
// them (made at first boot, as macOS does).
func guestHostKeys(d *GuestDisk) []string {
	if _, err := guestHostSigner(d); err != nil {
		return nil
	}
	return guestagent.HostKeys(d.TaskPath("/etc/ssh"))
}

// guestSystemDisk is the disk the guest boots from: what the PVC of the
// instance's macOS volume holds (volumecontent.go), which outlives the
// instance; an instance without one gets a disk of its own, holding the
// golden image.
func (s *Simulator) guestSystemDisk(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (*GuestDisk, error) {
	uid := vmi.UID
	if v := macOSVolume(vmi); v != nil {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := s.reader.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: v.DataVolume.Name}, pvc); err == nil {
			uid = pvc.UID
		}
	}
	dir, err := s.VolumeDir(uid)
	if err != nil {
		return nil, err
	}
	return &GuestDisk{dir: dir}, nil
}

// podAddress is the instance's address on the pod network, as KubeVirt
// reports it.
func podAddress(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, iface := range vmi.Status.Interfaces {
		if iface.IP != "" {
			return iface.IP
		}
	}
	return ""
}

// GuestAddress is the address the guest itself sees on its pod-network
// interface, as a real macOS guest reports it: behind KubeVirt's masquerade
// binding, the second address of the network's vmNetworkCIDR (10.0.2.2 by
// default; pkg/network/link/address.go, GenerateMasqueradeGatewayAndVmIPAddrs:
// the first is the gateway), which nobody outside the pod can reach; with
// bridge binding, the pod's own IP, which DHCP hands the guest.
func GuestAddress(vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, n := range vmi.Spec.Networks {
		if n.Pod == nil {
			continue
		}
		for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
			if iface.Name != n.Name {
				continue
			}
			if iface.Masquerade != nil {
				return masqueradeGuestIP(n.Pod.VMNetworkCIDR)
			}
			for _, st := range vmi.Status.Interfaces {
				if st.Name == n.Name {
					return st.IP
				}
			}
		}
	}
	return ""
}

// masqueradeGuestIP is the guest's address in a masquerade network: the
// network address plus two (KubeVirt's default network 10.0.2.0/24 when
// cidr is empty or does not parse).
func masqueradeGuestIP(cidr string) string {
	if cidr == "" {
		cidr = defaultVMNetworkCIDR
	}
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil || !prefix.Addr().Is4() {
		prefix = netip.MustParsePrefix(defaultVMNetworkCIDR)
	}
	return prefix.Masked().Addr().Next().Next().String()
}

// defaultVMNetworkCIDR is KubeVirt's api.DefaultVMCIDR.
const defaultVMNetworkCIDR = "10.0.2.0/24"

// macOSVolume is the DataVolume the guest's macOS lives on, read off the
// instance as its firmware reads it: the disks in boot order, the first the
// bootloader (OpenCore), whose picker starts macOS from the next one (a
// recovery image, if any, comes after it). So the DataVolume disk second in
// boot order, or the only one; nil when no DataVolume disk has an order.
func macOSVolume(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.Volume {
	order := map[string]uint{}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.BootOrder != nil {
			order[d.Name] = *d.BootOrder
		}
	}
	var booting []*kubevirtv1.Volume
	for i := range vmi.Spec.Volumes {
		if _, ok := order[vmi.Spec.Volumes[i].Name]; ok && vmi.Spec.Volumes[i].DataVolume != nil {
			booting = append(booting, &vmi.Spec.Volumes[i])
		}
	}
	slices.SortFunc(booting, func(a, b *kubevirtv1.Volume) int { return cmp.Compare(order[a.Name], order[b.Name]) })
	switch len(booting) {
	case 0:
		return nil
	case 1:
		return booting[0]
	default:
		return booting[1]
	}
}
