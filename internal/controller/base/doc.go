// Package base is what every macvirt reconciler shares: the reconcile
// skeleton (ordered steps, each answering one question), the condition
// values a pure compute<Kind>Status works with, the Stalled and Deleting
// conditions, the one status write, finalizers, the record of what this
// process did that its cache may not show yet (Assumed), events, owner
// references and optional reads. It knows no kind's rules and imports no
// controller package.
package base
