// Package metrics is every metric the controllers export: counters and
// histograms the reconcilers observe, and collectors that count machines,
// claims and Apple nodes' slots from the cache at scrape time, so a
// restarted operator's gauges are exact without bookkeeping. docs/metrics.md
// lists them (a test in internal/operator keeps it true).
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/slots"
	"github.com/macvirt/macvirt/internal/controller/state"
)

// Labels naming an object's namespace are machine_namespace (or
// claim_namespace), never namespace: Prometheus gives every series the
// scraped target's own namespace label (the operator's), and renames a
// clashing one to exported_namespace unless the scrape honours labels.

// MachinePhaseTransitions counts machines moving into a phase, for
// alerting on failures and measuring churn.
var MachinePhaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_machine_phase_transitions_total",
	Help: "MacMachines that moved into a phase, by that phase.",
}, []string{"phase"})

var machinesDesc = prometheus.NewDesc("macvirt_machines",
	"MacMachines by namespace and phase, as the operator's cache holds them.",
	[]string{"machine_namespace", "phase"}, nil)

var machineConditionsDesc = prometheus.NewDesc("macvirt_machine_conditions",
	"MacMachines by the status and reason of their Ready and Stalled conditions, as the operator's cache holds them.",
	[]string{"condition", "status", "reason"}, nil)

// machineCollector counts machines by phase from the cache at scrape time,
// so the gauge is exact after a restart without bookkeeping in Reconcile.
type machineCollector struct {
	reader client.Reader
}

// collectTimeout bounds one scrape's read of the cache.
const collectTimeout = 5 * time.Second

func (c *machineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- machinesDesc
	ch <- machineConditionsDesc
}

// scrapeList reads list from the cache for one scrape, within
// collectTimeout.
func scrapeList(reader client.Reader, list client.ObjectList, opts ...client.ListOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	return reader.List(ctx, list, opts...)
}

func (c *machineCollector) Collect(ch chan<- prometheus.Metric) {
	var list macvirtv1alpha1.MacMachineList
	if err := scrapeList(c.reader, &list); err != nil {
		return
	}
	type key struct{ ns, phase string }
	type condKey struct{ condition, status, reason string }
	counts, conds := map[key]int{}, map[condKey]int{}
	for i := range list.Items {
		m := &list.Items[i]
		phase := string(m.Status.Phase)
		if phase == "" {
			phase = string(macvirtv1alpha1.MachinePending)
		}
		counts[key{m.Namespace, phase}]++
		for _, t := range []string{macvirtv1alpha1.ConditionReady, macvirtv1alpha1.ConditionStalled} {
			if cond := meta.FindStatusCondition(m.Status.Conditions, t); cond != nil {
				conds[condKey{t, string(cond.Status), cond.Reason}]++
			}
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(n), k.ns, k.phase)
	}
	for k, n := range conds {
		ch <- prometheus.MustNewConstMetric(machineConditionsDesc, prometheus.GaugeValue, float64(n), k.condition, k.status, k.reason)
	}
}

// Collectors is every metric the controllers export, reading machines and
// nodes from reader at scrape time.
func Collectors(reader client.Reader) []prometheus.Collector {
	return []prometheus.Collector{MachinePhaseTransitions, &machineCollector{reader: reader}, &slotsCollector{reader: reader},
		&claimCollector{reader: reader}, &hostCollector{reader: reader}, PoolMachineOps, PoolMachines, poolIdleTarget, ClaimBindSeconds, ClaimReadySeconds, ClaimBootstraps, OrphansDeleted, ForcedPowerOffs, StopFailures,
		machineProvisionSeconds, machineBootSeconds,
		RunnerSetRunners, RunnerSetAssignedJobs, RunnerSetJobsWaiting, RunnerSetQueueWait, RunnerSetCleanups, RunnerSetGitHubErrors,
		BuildkiteAgents, BuildkiteJobs, BuildkiteJobsWaiting, BuildkiteCleanups, BuildkiteErrors}
}

// Register registers the operator's metrics with controller-runtime's
// registry; reader is normally the manager's cache.
func Register(reader client.Reader) error {
	for _, c := range Collectors(reader) {
		if err := ctrlmetrics.Registry.Register(c); err != nil {
			if _, already := err.(prometheus.AlreadyRegisteredError); !already {
				return err
			}
		}
	}
	return nil
}

// PoolMachineOps counts machines a pool created and deleted; a steady
// rise with no claims is a create/delete storm.
var PoolMachineOps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_pool_machine_operations_total",
	Help: "Machines created and deleted by pools.",
}, []string{"operation"})

// PoolMachines is each pool's machines by state, as last reconciled.
var PoolMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_pool_machines",
	Help: "MacPool machines by state (idle, suspended (of the idle ones), bound, provisioning, terminating).",
}, []string{"pool", "state"})

// ClaimBindSeconds is the time from a claim's creation to its binding.
var ClaimBindSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "macvirt_claim_bind_duration_seconds",
	Help:    "Time from MacClaim creation to Bound.",
	Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800},
})

// ClaimReadySeconds is the time from a claim's creation to its first
// Ready: the readiness SLI.
var ClaimReadySeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "macvirt_claim_ready_duration_seconds",
	Help:    "Time from MacClaim creation to its first Ready.",
	Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600},
})

// ClaimBootstraps counts claims' bootstraps by how they ended: Succeeded,
// Failed, TimedOut, or AgentTooOld (the machine's agent runs none).
var ClaimBootstraps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_claim_bootstraps_total",
	Help: "MacClaim bootstraps by result: Succeeded, Failed, TimedOut, AgentTooOld.",
}, []string{"result"})

// machineProvisionSeconds is the time from a machine's creation until it
// leaves Provisioning with its disks in place.
var machineProvisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "macvirt_machine_provisioning_duration_seconds",
	Help:    "Time from MacMachine creation until its disks are provisioned (it leaves Provisioning for Starting).",
	Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200},
})

// machineBootSeconds is the time from a machine's VM running until its
// guest agent reports macOS booted.
var machineBootSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "macvirt_machine_boot_duration_seconds",
	Help:    "Time from a MacMachine's VM running until its guest reports it booted (it turns Ready).",
	Buckets: []float64{10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900},
})

// StopFailures counts machines whose graceful stop failed and waits for
// a human: macOS's APFS is at risk if someone forces it.
var StopFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_machine_stop_failures_total",
	Help: "Graceful stops of MacMachines that failed and wait for a human (Stalled reason StopFailed), by machine namespace.",
}, []string{"machine_namespace"})

// OrphansDeleted counts machines deleted because a claim held two: only
// two operators at once whose caches disagree about which machines are
// idle (a leader hand-over) can bind a second, so a rise outside one is a
// defect to report.
var OrphansDeleted = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "macvirt_claim_orphans_deleted_total",
	Help: "Machines deleted because a claim was bound to two at once (0 but for two operators at once with caches that disagree).",
})

// ForgetPool drops a deleted pool's series, which would otherwise report
// its last counts for as long as the operator runs.
func ForgetPool(pool string) {
	PoolMachines.DeletePartialMatch(prometheus.Labels{"pool": pool})
	poolIdleTarget.DeleteLabelValues(pool)
}

// poolIdleTarget is each pool's spec.idle, so an alert can compare a
// pool's idle machines with what it should keep (0 while it is paused).
var poolIdleTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_pool_idle_target",
	Help: "Idle machines each MacPool should keep (its spec.idle; 0 while it is paused).",
}, []string{"pool"})

// PoolGauges records a pool's machines by state, as its status counts
// them, and its idle target.
func PoolGauges(pool *macvirtv1alpha1.MacPool, st macvirtv1alpha1.MacPoolStatus) {
	PoolMachines.WithLabelValues(pool.Name, "idle").Set(float64(st.Idle))
	PoolMachines.WithLabelValues(pool.Name, "suspended").Set(float64(st.Suspended))
	PoolMachines.WithLabelValues(pool.Name, "bound").Set(float64(st.Bound))
	PoolMachines.WithLabelValues(pool.Name, "provisioning").Set(float64(st.Provisioning))
	PoolMachines.WithLabelValues(pool.Name, "terminating").Set(float64(st.Terminating))
	target := int32(0)
	if pool.Spec.Idle != nil && !pool.Spec.Paused {
		target = *pool.Spec.Idle
	}
	poolIdleTarget.WithLabelValues(pool.Name).Set(float64(target))
}

// ForcedPowerOffs counts graceful stops that ended with KubeVirt killing
// macOS after the grace period, which risks APFS corruption.
var ForcedPowerOffs = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_machine_forced_poweroffs_total",
	Help: "Graceful stops of MacMachines that ended with KubeVirt killing macOS after the grace period, by machine namespace.",
}, []string{"machine_namespace"})

var (
	nodeSlotsDesc = prometheus.NewDesc("macvirt_node_macos_slots",
		"macOS slots each Apple node advertises (its allocatable macvirt.io/macos-slots).", []string{"node"}, nil)
	nodeSlotsUsedDesc = prometheus.NewDesc("macvirt_node_macos_slots_used",
		"macOS slots held on each Apple node by unfinished VirtualMachineInstances that request one.", []string{"node"}, nil)
	nodeCordonedDesc = prometheus.NewDesc("macvirt_node_cordoned",
		"1 while an Apple node is cordoned (spec.unschedulable): its free macOS slots take no new Mac.", []string{"node"}, nil)
)

// slotsCollector reports each Apple node's macOS slots from the cache at
// scrape time, so a deleted node's series goes with it.
type slotsCollector struct {
	reader client.Reader
}

func (c *slotsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeSlotsDesc
	ch <- nodeSlotsUsedDesc
	ch <- nodeCordonedDesc
}

func (c *slotsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	use, err := slots.ReadUse(ctx, c.reader)
	if err != nil {
		return
	}
	for _, u := range use {
		ch <- prometheus.MustNewConstMetric(nodeSlotsDesc, prometheus.GaugeValue, float64(u.Slots), u.Node)
		ch <- prometheus.MustNewConstMetric(nodeSlotsUsedDesc, prometheus.GaugeValue, float64(u.Used), u.Node)
		cordoned := 0.0
		if u.Cordoned {
			cordoned = 1
		}
		ch <- prometheus.MustNewConstMetric(nodeCordonedDesc, prometheus.GaugeValue, cordoned, u.Node)
	}
}

var (
	hostSlotsDesc = prometheus.NewDesc("macvirt_host_slots",
		"macOS VMs each Apple-silicon MacHost may run at once, as its host agent reports.", []string{"host"}, nil)
	hostMachinesDesc = prometheus.NewDesc("macvirt_host_machines",
		"MacMachines placed on each MacHost.", []string{"host"}, nil)
	hostConditionDesc = prometheus.NewDesc("macvirt_host_condition",
		"1 for each MacHost's Ready and Schedulable condition, labelled with its status and reason.",
		[]string{"host", "condition", "status", "reason"}, nil)
)

// hostCollector reports each MacHost from the cache at scrape time, so a
// deleted host's series goes with it.
type hostCollector struct {
	reader client.Reader
}

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- hostSlotsDesc
	ch <- hostMachinesDesc
	ch <- hostConditionDesc
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	hosts := &macvirtv1alpha1.MacHostList{}
	if err := scrapeList(c.reader, hosts); err != nil {
		return
	}
	for i := range hosts.Items {
		h := &hosts.Items[i]
		slots := 0.0
		if a := h.Status.Agent; a != nil {
			slots = float64(a.Slots)
		}
		ch <- prometheus.MustNewConstMetric(hostSlotsDesc, prometheus.GaugeValue, slots, h.Name)
		ch <- prometheus.MustNewConstMetric(hostMachinesDesc, prometheus.GaugeValue, float64(h.Status.Machines), h.Name)
		for _, cond := range h.Status.Conditions {
			ch <- prometheus.MustNewConstMetric(hostConditionDesc, prometheus.GaugeValue, 1, h.Name, cond.Type, string(cond.Status), cond.Reason)
		}
	}
}

// ObservePhaseDurations records how long provisioning and booting took,
// at now, when a machine's status moves from before to its own: leaving
// Provisioning for Starting (timed from creation), and turning Ready from
// a fresh start or boot (timed from the VM running). A Ready machine that
// lost its heartbeat or was paused, and recovers, booted nothing.
func ObservePhaseDurations(before *macvirtv1alpha1.MacMachineStatus, m *macvirtv1alpha1.MacMachine, now time.Time) {
	from, to := before.Phase, m.Status.Phase
	if from == macvirtv1alpha1.MachineProvisioning && to == macvirtv1alpha1.MachineStarting && !m.CreationTimestamp.IsZero() {
		machineProvisionSeconds.Observe(now.Sub(m.CreationTimestamp.Time).Seconds())
	}
	var was string
	if c := meta.FindStatusCondition(before.Conditions, macvirtv1alpha1.ConditionReady); c != nil {
		was = c.Reason
	}
	if to == macvirtv1alpha1.MachineReady && (was == macvirtv1alpha1.ReasonStarting || was == macvirtv1alpha1.ReasonBooting) &&
		m.Status.RunningSince != nil && !now.Before(m.Status.RunningSince.Time) {
		machineBootSeconds.Observe(now.Sub(m.Status.RunningSince.Time).Seconds())
	}
}

var (
	claimsDesc = prometheus.NewDesc("macvirt_claims",
		"MacClaims by phase, as the operator's cache holds them.", []string{"phase"}, nil)
	claimOldestWaitingDesc = prometheus.NewDesc("macvirt_claim_oldest_waiting_seconds",
		"Age of the oldest MacClaim that has no machine yet (0 when none waits).", nil, nil)
)

// claimCollector counts claims by phase and ages the oldest waiting one
// from the cache at scrape time, so a claim stuck for an hour shows
// without any bookkeeping.
type claimCollector struct {
	reader client.Reader
	// now is the clock; time.Now when nil.
	now func() time.Time
}

func (c *claimCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- claimsDesc
	ch <- claimOldestWaitingDesc
}

func (c *claimCollector) Collect(ch chan<- prometheus.Metric) {
	var list macvirtv1alpha1.MacClaimList
	if err := scrapeList(c.reader, &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	counts := map[string]int{}
	var oldest time.Duration
	for i := range list.Items {
		cl := &list.Items[i]
		phase := string(cl.Status.Phase)
		if phase == "" {
			phase = string(macvirtv1alpha1.ClaimPending)
		}
		counts[phase]++
		if state.ClaimWaiting(cl) && cl.DeletionTimestamp.IsZero() {
			oldest = max(oldest, now.Sub(cl.CreationTimestamp.Time))
		}
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.GaugeValue, float64(n), phase)
	}
	ch <- prometheus.MustNewConstMetric(claimOldestWaitingDesc, prometheus.GaugeValue, oldest.Seconds())
}

// Runner sets' metrics carry runner_set_namespace and runner_set.
var runnerSetLabels = []string{"runner_set_namespace", "runner_set"}

// RunnerSetRunners is each runner set's runners by state (pending, idle,
// running, finishing), as last reconciled.
var RunnerSetRunners = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_runnerset_runners",
	Help: "MacRunnerSet runners by state: pending (Mac booting or runner not online), idle, running, finishing.",
}, append(runnerSetLabels, "state"))

// RunnerSetAssignedJobs is GitHub's count of jobs assigned to each set's
// scale set, waiting or running.
var RunnerSetAssignedJobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_runnerset_assigned_jobs",
	Help: "Jobs GitHub assigned to each MacRunnerSet's scale set, waiting or running (its totalAssignedJobs statistic).",
}, runnerSetLabels)

// RunnerSetJobsWaiting is how long each set has had, without a break, a
// job waiting for a runner.
var RunnerSetJobsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_runnerset_jobs_waiting_seconds",
	Help: "Seconds since each MacRunnerSet last had no job waiting for a runner (GitHub's assigned jobs above its running ones); 0 while none waits.",
}, runnerSetLabels)

// RunnerSetQueueWait is the time from a job's assignment to the scale set
// until a runner took it, as GitHub timed them.
var RunnerSetQueueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "macvirt_runnerset_queue_wait_seconds",
	Help:    "Time from a job's assignment to a MacRunnerSet's scale set until a runner took it (GitHub's scaleSetAssignTime to runnerAssignTime).",
	Buckets: []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600},
}, runnerSetLabels)

// RunnerSetCleanups counts runners a set cleaned up before their job ended
// it, by why: registration_timeout, job_timeout, mac_lost, surplus, orphan.
var RunnerSetCleanups = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_runnerset_cleanups_total",
	Help: "Runners a MacRunnerSet removed from GitHub and released early, by reason: registration_timeout, job_timeout, mac_lost, surplus, orphan.",
}, append(runnerSetLabels, "reason"))

// RunnerSetGitHubErrors counts errors GitHub answered each set's listener
// and reconciler with, by HTTP status (0: no answer).
var RunnerSetGitHubErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_runnerset_github_errors_total",
	Help: "Errors from GitHub for each MacRunnerSet, by HTTP status code (0 when GitHub did not answer).",
}, append(runnerSetLabels, "code"))

// ForgetRunnerSet drops a deleted set's series.
func ForgetRunnerSet(namespace, name string) {
	l := prometheus.Labels{"runner_set_namespace": namespace, "runner_set": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		RunnerSetRunners, RunnerSetAssignedJobs, RunnerSetJobsWaiting, RunnerSetQueueWait, RunnerSetCleanups, RunnerSetGitHubErrors,
	} {
		v.DeletePartialMatch(l)
	}
}

// Buildkite queues' metrics carry buildkite_queue_namespace and
// buildkite_queue.
var buildkiteLabels = []string{"buildkite_queue_namespace", "buildkite_queue"}

// BuildkiteAgents is each queue's agents by state (pending, running,
// finishing), as last reconciled.
var BuildkiteAgents = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_buildkitequeue_agents",
	Help: "MacBuildkiteQueue agents by state: pending (Mac booting or waiting to be handed a job), running, finishing.",
}, append(buildkiteLabels, "state"))

// BuildkiteJobs is each queue's jobs that want a Mac, scheduled or handed
// to one of its agents and not ended.
var BuildkiteJobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_buildkitequeue_jobs",
	Help: "Jobs of each MacBuildkiteQueue's cluster queue that want a Mac: scheduled, or handed to one of its agents and not ended.",
}, buildkiteLabels)

// BuildkiteJobsWaiting is how long each queue has had, without a break, a
// scheduled job no agent of its was handed.
var BuildkiteJobsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_buildkitequeue_jobs_waiting_seconds",
	Help: "Seconds since each MacBuildkiteQueue last had no scheduled job waiting for an agent; 0 while none waits.",
}, buildkiteLabels)

// BuildkiteCleanups counts agents a queue released before their job ended
// it, by why: registration_timeout (no job handed within startTimeout),
// job_timeout, mac_lost, surplus.
var BuildkiteCleanups = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_buildkitequeue_cleanups_total",
	Help: "Agents a MacBuildkiteQueue released early, by reason: registration_timeout, job_timeout, mac_lost, surplus.",
}, append(buildkiteLabels, "reason"))

// BuildkiteErrors counts errors Buildkite answered each queue with, by
// HTTP status (0: no answer).
var BuildkiteErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_buildkitequeue_buildkite_errors_total",
	Help: "Errors from Buildkite for each MacBuildkiteQueue, by HTTP status code (0 when Buildkite did not answer).",
}, append(buildkiteLabels, "code"))

// ForgetBuildkiteQueue drops a deleted queue's series.
func ForgetBuildkiteQueue(namespace, name string) {
	l := prometheus.Labels{"buildkite_queue_namespace": namespace, "buildkite_queue": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		BuildkiteAgents, BuildkiteJobs, BuildkiteJobsWaiting, BuildkiteCleanups, BuildkiteErrors,
	} {
		v.DeletePartialMatch(l)
	}
}
