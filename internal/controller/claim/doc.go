// Package claim reconciles MacClaims: it binds a claim to an idle machine
// of its pool or class, or creates one on demand, the way a
// PersistentVolumeClaim binds a PersistentVolume, and makes the machine
// reachable: a DNS name under the namespace's headless Service, or a
// Service of its own for NodePort and LoadBalancer, and the connection
// Secret a claim asks for.
//
// Binding is a protocol (protocol.go): the machine's claimRef, written
// under the machine's resourceVersion, is the lock, and this process
// remembers the binding until the claim's status records it. Reconcile
// runs the steps (find.go, which only reads; protocol.go, bind.go,
// expose.go, secret.go) and defers one status write, computed purely by
// computeClaimStatus (status.go) from the scope, which records Bound and
// Ready together once the machine's NetworkPolicy lets the claim in; the
// write writes nothing else. What follows Ready (the DNS name's
// EndpointSlice, the connection Secret) is written by the reconcile after
// it, off the path to Ready. Files, from the ground up: scope.go,
// reservations.go and the pure decisions (binding.go, service.go,
// connection.go) and status.go; reconciler.go and pools.go; the steps; and
// controller.go. No file uses one above it.
package claim
