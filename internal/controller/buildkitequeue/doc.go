// Package buildkitequeue reconciles MacBuildkiteQueues: a Buildkite cluster
// queue whose jobs each run on a fresh Mac. macvirt is a custom stack on
// the queue (Buildkite's Stacks API): the reconciler polls the queue's
// scheduled jobs, and Buildkite is a backend of the runner core
// (backend.go): the core keeps one MacClaim per agent and releases every Mac
// after its one job; Buildkite's part is, once a Mac is Ready, reserving a
// job for it and issuing a short-lived job acquisition token that the
// Mac's guest task hands to `buildkite-agent start --acquire-job`. The
// status is computed once from the scope (status.go).
package buildkitequeue
