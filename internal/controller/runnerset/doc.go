// Package runnerset reconciles MacRunnerSets: a GitHub Actions runner scale
// set whose runners are fresh Macs. A listener per set keeps the scale set's
// message session with GitHub (listeners.go) and tells the reconciler how
// many jobs GitHub assigned and which runner took which job; the reconciler
// keeps one MacClaim per runner, hands each Mac its just-in-time runner
// configuration as a guest task, releases every Mac after its one job, and
// removes from GitHub every runner no claim backs. Decisions are pure
// (plan.go); the status is computed once from the scope (status.go).
package runnerset
