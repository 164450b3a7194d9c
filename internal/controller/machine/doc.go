// Package machine reconciles MacMachines: it turns a machine into a
// KubeVirt VirtualMachine and CDI DataVolumes, walks it through its phases
// from what KubeVirt, CDI and the guest agent report, stops it gracefully
// and deletes it safely (macOS is never killed to delete it).
//
// Reconcile gets the machine, gathers an observation (observation.go), runs
// the ordered steps (each answers one question and records what it found
// or failed to do), and defers one status write, computed purely by
// computeMachineStatus (status.go) from the observation and sent only when
// it changed. Files, from the ground up: the observation; the pure readings
// of it (progress.go, ownership.go, stop.go, launch.go, power.go, disks.go,
// vm.go, guest.go) and status.go; reconciler.go, with what the steps share;
// the steps (record.go, class.go, agent.go, read.go, network.go,
// domainhook.go, provision.go, hostrules.go, runstate.go, release.go,
// delete.go); exposure.go, the second controller of machines, which keeps
// a machine's NetworkPolicy in step with its binding; events.go, what a
// status change announces; and controller.go, Reconcile, the status write
// and the watches. No file uses one above it.
package machine
