// Package runnercore is what a set of CI runners on fresh Macs needs,
// whichever CI system it serves: the plan from demand to claims (pure,
// plan.go), one claim per runner whose Mac runs one job and is released,
// the job handed to each Mac, leaked registrations removed after a crash,
// and a warm pool that follows demand. A CI system's kind keeps its own
// reconciler, scope and status, embeds Scope, and implements Backend: the
// guest task, how a Mac is handed its job, how a registration is removed.
package runnercore
