package pool

import (
	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// poolScope is what one reconcile of a pool read, decided and failed to do.
type poolScope struct {
	Pool *macvirtv1alpha1.MacPool
	// Class is nil when the pool's class does not exist.
	Class    *macvirtv1alpha1.MacClass
	Machines []macvirtv1alpha1.MacMachine
	Plan     poolPlan
	// Blocked is a problem that needs a human (class or namespace missing).
	Blocked *base.Problem
	// WriteFailed is the first create or delete the API server refused in
	// this reconcile, in its own words.
	WriteFailed *base.Problem
	// Slots, when machines of the pool wait for a macOS slot, says so with
	// each Apple node's free slots.
	Slots *base.Problem
}
