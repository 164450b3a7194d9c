// Package runnerset reconciles MacRunnerSets: a GitHub Actions runner scale
// set whose runners are fresh Macs. A listener per set keeps the scale set's
// message session with GitHub (listeners.go) and tells the reconciler how
// many jobs GitHub assigned and which runner took which job. GitHub is a
// backend of the runner core (backend.go): the core keeps one MacClaim per
// runner and releases every Mac after its one job; GitHub's part is the
// just-in-time runner configuration each Mac is handed as a guest task and
// the removal of runners from the scale set, including every runner no
// claim backs. The status is computed once from the scope (status.go).
package runnerset
