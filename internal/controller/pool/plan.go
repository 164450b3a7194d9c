package pool

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// machineState is how a pool counts one of its machines.
type machineState int

// Machine states, as a pool sees them.
const (
	stateProvisioning machineState = iota // unbound, not Ready yet
	stateIdle                             // unbound and Ready
	stateBound                            // has a claimRef (bound now or used before)
	stateFailed                           // unbound and Failed, or its guest fell silent
	stateTerminating                      // being deleted
	stateReleased                         // its claim is gone under Retain; outside the cap
	stateDraining                         // unbound, on a node being drained: replaced at once
)

// poolMachine is what the planner needs to know about a pool's machine.
type poolMachine struct {
	Name     string
	Revision string
	State    machineState
	// Suspended: its VM is suspended on its MacHost.
	Suspended bool
	// ReplaceAt, for an unhealthy machine, is when it may be replaced: at
	// once for a Failed one, a while after its guest fell silent.
	ReplaceAt time.Time
}

// silenceGrace is how long a pool waits after a guest agent fell silent
// before replacing its machine. Guests are judged silent from their
// recorded heartbeats, which a steady guest's are written about every
// other interval: spread over two intervals (at most 60 s each). The grace
// is longer, so when one cause silences every guest (an unreachable
// endpoint) all of them are counted against maxUnhealthy before the first
// is replaced.
const silenceGrace = 150 * time.Second

// poolInput is everything the planner decides from.
type poolInput struct {
	Pool     string
	Idle     int32
	Max      int32
	MaxProv  int32
	Paused   bool
	Revision string
	Machines []poolMachine
	// MaxUnhealthy is spec.maxUnhealthy as given (nil for the default).
	MaxUnhealthy *intstr.IntOrString
	Now          time.Time
}

// poolPlan is what the pool controller should do, and the counts it saw.
type poolPlan struct {
	// Create lists machine names to create: free slots "<pool>-<n>" with n
	// below maxMachines. Deterministic names make the cap hold across stale
	// caches, restarts and two operators: a second create of a slot fails
	// with AlreadyExists instead of adding a machine.
	Create []string
	// Delete lists machines to delete (failed, surplus idle, replaced idle).
	Delete []string
	Counts macvirtv1alpha1.MacPoolStatus
	// MaxUnhealthy is the scaled maxUnhealthy; TooManyUnhealthy says more
	// machines than that are unhealthy, so none is replaced.
	MaxUnhealthy     int32
	TooManyUnhealthy bool
	// RecheckAfter is when an unhealthy machine's grace ends (zero: none
	// waits).
	RecheckAfter time.Duration
}

// slotName is the deterministic name of a pool's n-th machine slot.
func slotName(pool string, n int) string { return pool + "-" + strconv.Itoa(n) }

// slotOf returns the slot index a machine name occupies, if any.
func slotOf(pool, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, pool+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == rest
}

// planPool decides creates and deletes. Scale-down removes idle machines
// only, old revisions first; idle machines of an old revision are replaced
// by surging first (a new machine is created, the old one deleted once the
// pool holds more Ready idle machines than its target).
func planPool(in poolInput) poolPlan {
	var p poolPlan
	var idle, oldIdle, failed []poolMachine
	var draining []string
	released := 0
	for _, m := range in.Machines {
		if m.State == stateReleased {
			// Kept for a human, stopped, and outside maxMachines: tenants
			// cannot drain a pool by claiming and deleting with Retain.
			p.Counts.Released++
			released++
			continue
		}
		p.Counts.Machines++
		if m.Revision == in.Revision {
			p.Counts.UpdatedMachines++
		}
		switch m.State {
		case stateProvisioning:
			p.Counts.Provisioning++
		case stateIdle:
			p.Counts.Idle++
			if m.Suspended {
				p.Counts.Suspended++
			}
			idle = append(idle, m)
			if m.Revision != in.Revision {
				oldIdle = append(oldIdle, m)
			}
		case stateBound:
			p.Counts.Bound++
		case stateFailed:
			p.Counts.Unhealthy++
			failed = append(failed, m)
		case stateTerminating:
			p.Counts.Terminating++
		case stateDraining:
			p.Counts.Terminating++
			draining = append(draining, m.Name)
		}
	}
	spec := macvirtv1alpha1.MacPoolSpec{MaxUnhealthy: in.MaxUnhealthy}
	p.MaxUnhealthy = spec.EffectiveMaxUnhealthy(p.Counts.Provisioning + p.Counts.Idle + p.Counts.Unhealthy)
	p.TooManyUnhealthy = p.Counts.Unhealthy > p.MaxUnhealthy
	if in.Paused {
		return p
	}
	// Unbound machines on a draining node are deleted at once, however
	// many: the drain waits for them, and deleting stops macOS gracefully
	// first. They are not supply, so replacements are created elsewhere.
	p.Delete = append(p.Delete, draining...)
	// Unhealthy machines in their grace keep their places: neither deleted
	// nor backfilled yet.
	inGrace := int32(0)
	if !p.TooManyUnhealthy {
		// Unhealthy machines are replaced at the pace replacements
		// provision: no more deletes than free provisioning slots, so a
		// misjudgement costs a few warm Macs, never the pool.
		pace := int(max(0, in.MaxProv-p.Counts.Provisioning-p.Counts.Terminating))
		for _, m := range failed {
			if wait := m.ReplaceAt.Sub(in.Now); wait > 0 {
				inGrace++
				if p.RecheckAfter == 0 || wait < p.RecheckAfter {
					p.RecheckAfter = wait
				}
				continue
			}
			if len(p.Delete) < pace {
				p.Delete = append(p.Delete, m.Name)
			}
		}
	}
	// Surplus Ready idle machines go, old revisions first, then the most
	// recent slots, so the oldest current machines stay.
	if surplus := int(p.Counts.Idle - in.Idle); surplus > 0 {
		slices.SortStableFunc(idle, func(a, b poolMachine) int {
			aOld, bOld := a.Revision != in.Revision, b.Revision != in.Revision
			if aOld != bOld {
				if aOld {
					return -1
				}
				return 1
			}
			return strings.Compare(b.Name, a.Name)
		})
		for _, m := range idle[:surplus] {
			p.Delete = append(p.Delete, m.Name)
		}
		oldIdle = nil
		if len(idle) > surplus {
			for _, m := range idle[surplus:] {
				if m.Revision != in.Revision {
					oldIdle = append(oldIdle, m)
				}
			}
		}
	}
	// Supply counts every unbound machine on its way to idle; each idle
	// machine of an old revision wants one current replacement on top.
	supply := min(p.Counts.Idle, in.Idle) + p.Counts.Provisioning + inGrace
	if p.TooManyUnhealthy {
		// They keep their places until they recover or a human acts: new
		// machines would meet whatever made these look unhealthy.
		supply += p.Counts.Unhealthy
	}
	want := in.Idle + int32(len(oldIdle)) //nolint:gosec // bounded by the machine count.
	create := max(0, want-supply)
	create = min(create, max(0, in.MaxProv-p.Counts.Provisioning), max(0, in.Max-p.Counts.Machines))
	p.Create = freeSlots(in, int(create), released)
	return p
}

// freeSlots returns the first n unused slot names below the cap, which is
// raised by the released machines, whose slots stay taken.
func freeSlots(in poolInput, n, released int) []string {
	if n <= 0 {
		return nil
	}
	used := map[int]bool{}
	for _, m := range in.Machines {
		if s, ok := slotOf(in.Pool, m.Name); ok {
			used[s] = true
		}
	}
	var out []string
	for s := 0; s < int(in.Max)+released && len(out) < n; s++ {
		if !used[s] {
			out = append(out, slotName(in.Pool, s))
		}
	}
	return out
}

// describePlan is a log-friendly summary.
func describePlan(p poolPlan) string {
	return fmt.Sprintf("create %v, delete %v", p.Create, p.Delete)
}
