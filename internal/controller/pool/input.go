package pool

import (
	"time"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/drain"
	"github.com/macvirt/macvirt/internal/controller/state"
	"github.com/macvirt/macvirt/internal/render"
)

// poolInputFor turns the pool and its machines into planner input. Without
// a class, the pool plans nothing but still counts.
func poolInputFor(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, items []macvirtv1alpha1.MacMachine, now time.Time) poolInput {
	in := poolInput{Pool: pool.Name, Idle: pool.Spec.EffectiveIdle(), MaxProv: pool.Spec.MaxProvisioning, Paused: pool.Spec.Paused,
		MaxUnhealthy: pool.Spec.MaxUnhealthy, Now: now}
	in.Max = pool.Spec.EffectiveMaxMachines()
	if class == nil || class.ImageUnresolved() {
		// No class, or a class whose image is not imported yet: nothing
		// made now could get a disk.
		in.Paused = true
	}
	if class != nil {
		in.Revision = render.ClassRevision(class)
	}
	for i := range items {
		m := &items[i]
		pm := poolMachine{Name: m.Name, Revision: machineRevision(m), State: poolMachineState(m),
			Suspended: m.Status.Phase == macvirtv1alpha1.MachineSuspended}
		if class != nil && m.Spec.SuspendWhenIdle != suspendsIdle(pool, class) {
			// Made under another idleState: replaced while idle, as after
			// a class change.
			pm.Revision += "@idleState"
		}
		if c := silentGuest(m); pm.State == stateFailed && c != nil && m.Status.Phase != macvirtv1alpha1.MachineFailed {
			pm.ReplaceAt = silentReplaceAt(m, c, class)
		}
		in.Machines = append(in.Machines, pm)
	}
	return in
}

// suspendsIdle says whether the pool's machines are made to be suspended
// while idle: its idleState is Suspended and its class runs on MacHosts
// (KubeVirt's pause frees no licence slot, a node's macos-slots resource
// stays taken by the paused VM's pod).
func suspendsIdle(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass) bool {
	return pool.Spec.IdleState == macvirtv1alpha1.IdleSuspended && class.Spec.OnHosts()
}

// machineRevision is the class revision a machine was made at; a VM whose
// host now caches a newer digest of the class's image (its image.refresh
// pulled a re-pushed tag) counts as of an older revision, so the pool
// replaces it while idle, as after a class change.
func machineRevision(m *macvirtv1alpha1.MacMachine) string {
	if hv := m.Status.Host; hv != nil && hv.ImageDigest != "" && hv.LatestImageDigest != "" && hv.ImageDigest != hv.LatestImageDigest {
		return m.Spec.ClassRevision + "@" + hv.ImageDigest
	}
	return m.Spec.ClassRevision
}

// poolMachineState classifies a machine for its pool. A machine that was
// ever bound counts as bound: a used machine never returns to the idle set.
// An unbound machine whose guest agent fell silent past heartbeatTimeout is
// unhealthy like a failed one: nobody should be handed a hung Mac.
func poolMachineState(m *macvirtv1alpha1.MacMachine) machineState {
	switch {
	case !m.DeletionTimestamp.IsZero():
		return stateTerminating
	case m.Labels[macvirtv1alpha1.LabelReleased] != "":
		return stateReleased
	case m.Spec.ClaimRef != nil:
		return stateBound
	case drain.NodeOf(m) != "":
		return stateDraining
	case m.Status.Phase == macvirtv1alpha1.MachineFailed, guestFellSilent(m):
		return stateFailed
	case state.MachineReady(m):
		return stateIdle
	}
	return stateProvisioning
}
