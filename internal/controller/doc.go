// Package controller holds macvirt's reconcilers. Each kind's files split by
// concern: <kind>_controller.go (Reconcile and wiring), <kind>_phases.go
// (ordered, idempotent ensure functions), <kind>_status.go (pure status
// computation from what was observed) and <kind>_delete.go.
package controller
