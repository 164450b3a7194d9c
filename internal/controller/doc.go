// Package controller holds macvirt's reconcilers. Every kind's reconciler
// has one shape: Reconcile gets the object, gathers what it needs into a
// scope (machineObservation, poolScope, claimScope, classScope), runs an
// ordered list of (proceed, err) steps that each answer one question and
// record what they found or failed to do, and defers one status write,
// computed by a pure compute<Kind>Status from the scope and sent only when
// it changed (writeStatus). A refused write is recorded in the scope, so it
// reaches status in the API server's words and a Warning event, and is
// returned for backoff; a failed read writes no status, since a status
// computed from half an observation would be wrong.
//
// Files split by concern: <kind>_controller.go (Reconcile and wiring),
// <kind>_phases.go or the steps beside Reconcile (idempotent ensure
// functions), <kind>_status.go (pure status computation), <kind>_plan.go
// (pure decisions, table-tested), <kind>_delete.go, and a machine's
// readings of what KubeVirt and CDI report by topic (macmachine_disks.go,
// _launch.go, _power.go, _stop.go, _timing.go). macclaim_protocol.go is
// the binding protocol: the claim's status reserves a machine under the
// claim's resourceVersion before the machine is bound, so a claim never
// holds two machines, even with two operators at once. The claim's
// reservation is the one status write made inside a step; it is a lock,
// not a report. conditions.go,
// events.go, ownerrefs.go and statuswrite.go hold what every kind shares,
// indexes.go the cache indexes the watches map through. Tenancy rules come
// from internal/tenancy, shared with the admission webhook.
package controller
