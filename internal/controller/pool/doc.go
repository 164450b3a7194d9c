// Package pool reconciles MacPools: it keeps a pool's idle target of warm,
// Ready machines, never more than maxMachines and at most maxProvisioning
// at once, replaces unhealthy and outdated idle machines, and says when
// machines wait for a macOS slot.
//
// The plan is pure (plan.go: planPool, table-tested) and made from the
// pool's machines as input.go reads them; the steps (phases.go) adopt,
// delete and create as planned, in deterministic slots so the cap holds
// across stale caches and two operators; computePoolStatus (status.go)
// derives the status, written once by controller.go. No file uses one
// above it.
package pool
