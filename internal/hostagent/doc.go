// Package hostagent is the macvirt host agent's logic: it keeps the
// MacHost of its Mac (registration and heartbeat) and runs the MacMachines
// the operator placed there through a vz.Driver (lume or tart). What to do
// with a machine's VM is decided purely (decide.go); the agent writes only
// status.agent of its MacHost and status.host of its machines.
package hostagent
