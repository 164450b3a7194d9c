// Package runnercore is what a fleet of CI runners on fresh Macs needs,
// whichever CI system it serves: the plan from demand to claims (pure,
// plan.go), one claim per runner whose Mac runs one job and is released,
// the job handed to each Mac, leaked registrations removed after a crash,
// a warm pool that follows demand, and the fleet's status and its one
// write (status.go pure, write.go).
//
// A CI system's kind (MacRunnerSet for GitHub Actions, MacBuildkiteQueue
// for Buildkite) keeps its own reconciler, scope and status fields. A new
// kind uses the core this way:
//
//   - its API status embeds macvirtv1alpha1.FleetStatus inline (desired,
//     pending, running, the warm pool, the conditions) and keeps its last
//     service error as a *macvirtv1alpha1.ServiceError; its object gets
//     the two methods of FleetObject (Fleet, LastServiceError);
//   - its scope embeds Scope, its view of the object is a Set (with the
//     ServiceErrorReason of its new-error events), and it implements
//     Backend: the guest task, how a Mac is handed its job, how a
//     registration is removed;
//   - its reconcile runs the Engine's steps around its own (demand from
//     its CI system, then Decide);
//   - its pure compute<Kind>Status fills the kind's own fields (its counts
//     in its own words, RunnerStatuses, ServiceError) and sets FleetStatus
//     from a Readiness: its reasons and messages for the CI system
//     refusing the credentials or failing, for connecting, at the maximum
//     and serving; Ready orders them the same for every kind;
//   - its deferred status patch sets its metrics, copies the object,
//     assigns the computed status and calls Engine.WriteStatus, which
//     writes only a changed status and warns when the fleet turns Stalled
//     or the CI system answers a new error.
package runnercore
