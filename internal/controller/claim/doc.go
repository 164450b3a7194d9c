// Package claim reconciles MacClaims: it binds a claim to an idle machine
// of its pool or class, or creates one on demand, the way a
// PersistentVolumeClaim binds a PersistentVolume, and makes the machine
// reachable (a Service, its EndpointSlice, a connection Secret).
//
// Binding is a protocol (protocol.go): the claim's status reserves a
// machine under the claim's resourceVersion before the machine's claimRef
// is written under the machine's, so a claim never holds two machines, even
// with two operators at once. That reservation is the one status write made
// inside a step; it is a lock, not a report. Reconcile runs the steps
// (find.go, bind.go, expose.go, then secret.go's connection Secret) and
// defers one status write, computed purely by computeClaimStatus (status.go)
// from the scope; the write writes nothing else. Files, from the ground up:
// scope.go, reservations.go and the pure decisions (binding.go, service.go,
// connection.go) and status.go; reconciler.go and pools.go; the steps; and
// controller.go. No file uses one above it.
package claim
