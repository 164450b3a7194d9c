package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// machinePhaseTransitions counts status writes that moved a machine into a
// phase, for alerting on failures and measuring churn.
var machinePhaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_machine_status_updates_total",
	Help: "MacMachine status updates, by the phase written.",
}, []string{"phase"})

var machinesDesc = prometheus.NewDesc("macvirt_machines",
	"MacMachines by namespace and phase, as the operator's cache holds them.",
	[]string{"namespace", "phase"}, nil)

// machineCollector counts machines by phase from the cache at scrape time,
// so the gauge is exact after a restart without bookkeeping in Reconcile.
type machineCollector struct {
	reader client.Reader
}

// collectTimeout bounds one scrape's read of the cache.
const collectTimeout = 5 * time.Second

func (c *machineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machinesDesc }

func (c *machineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	var list macvirtv1alpha1.MacMachineList
	if err := c.reader.List(ctx, &list); err != nil {
		return
	}
	type key struct{ ns, phase string }
	counts := map[key]int{}
	for i := range list.Items {
		phase := string(list.Items[i].Status.Phase)
		if phase == "" {
			phase = string(macvirtv1alpha1.MachinePending)
		}
		counts[key{list.Items[i].Namespace, phase}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(n), k.ns, k.phase)
	}
}

// RegisterMetrics registers the operator's metrics with controller-runtime's
// registry; reader is normally the manager's cache.
func RegisterMetrics(reader client.Reader) error {
	for _, c := range []prometheus.Collector{machinePhaseTransitions, &machineCollector{reader: reader}, &slotsCollector{reader: reader},
		poolMachineOps, poolMachines, claimBindSeconds, orphansDeleted, forcedPowerOffs} {
		if err := metrics.Registry.Register(c); err != nil {
			if _, already := err.(prometheus.AlreadyRegisteredError); !already {
				return err
			}
		}
	}
	return nil
}

func ptrUID(obj client.Object) *types.UID {
	uid := obj.GetUID()
	return &uid
}

// poolMachineOps counts machines a pool created and deleted; a steady
// rise with no claims is a create/delete storm.
var poolMachineOps = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_pool_machine_operations_total",
	Help: "Machines created and deleted by pools.",
}, []string{"operation"})

// poolMachines is each pool's machines by state, as last reconciled.
var poolMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_pool_machines",
	Help: "MacPool machines by state (idle, bound, provisioning, terminating).",
}, []string{"pool", "state"})

// claimBindSeconds is the time from a claim's creation to its binding.
var claimBindSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "macvirt_claim_bind_duration_seconds",
	Help:    "Time from MacClaim creation to Bound.",
	Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800},
})

// orphansDeleted counts machines deleted because a claim held two; the
// binding protocol keeps it at zero, so any rise is a defect to report.
var orphansDeleted = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "macvirt_claim_orphans_deleted_total",
	Help: "Machines deleted because a claim was bound to two at once (expected to stay 0).",
})

func poolGauges(pool string, st macvirtv1alpha1.MacPoolStatus) {
	poolMachines.WithLabelValues(pool, "idle").Set(float64(st.Idle))
	poolMachines.WithLabelValues(pool, "bound").Set(float64(st.Bound))
	poolMachines.WithLabelValues(pool, "provisioning").Set(float64(st.Provisioning))
	poolMachines.WithLabelValues(pool, "terminating").Set(float64(st.Terminating))
}

// forcedPowerOffs counts graceful stops that ended with KubeVirt killing
// macOS after the grace period, which risks APFS corruption.
var forcedPowerOffs = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "macvirt_machine_forced_poweroffs_total",
	Help: "Graceful stops of MacMachines that ended with KubeVirt killing macOS after the grace period.",
}, []string{"namespace"})

var (
	nodeSlotsDesc = prometheus.NewDesc("macvirt_node_macos_slots",
		"macOS slots each Apple node advertises (its allocatable macvirt.io/macos-slots).", []string{"node"}, nil)
	nodeSlotsUsedDesc = prometheus.NewDesc("macvirt_node_macos_slots_used",
		"macOS slots held on each Apple node by unfinished VirtualMachineInstances that request one.", []string{"node"}, nil)
)

// slotsCollector reports each Apple node's macOS slots from the cache at
// scrape time, so a deleted node's series goes with it.
type slotsCollector struct {
	reader client.Reader
}

func (c *slotsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeSlotsDesc
	ch <- nodeSlotsUsedDesc
}

func (c *slotsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	use, err := readSlotUse(ctx, c.reader)
	if err != nil {
		return
	}
	for _, u := range use {
		ch <- prometheus.MustNewConstMetric(nodeSlotsDesc, prometheus.GaugeValue, float64(u.Slots), u.Node)
		ch <- prometheus.MustNewConstMetric(nodeSlotsUsedDesc, prometheus.GaugeValue, float64(u.Used), u.Node)
	}
}
