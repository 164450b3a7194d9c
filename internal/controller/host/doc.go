// Package host keeps the operator's side of every MacHost: whether the Mac
// is alive (its agent's lease), Ready and Schedulable, and how many
// machines are placed on it. The decisions are pure (status.go:
// computeHostStatus); the host agent's own report is never written here.
package host
