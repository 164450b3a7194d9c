package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

func TestMachineCollectorCountsMachinesByNamespacePhaseAndCondition(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	mk := func(ns, name string, phase macvirtv1alpha1.MachinePhase) *macvirtv1alpha1.MacMachine {
		return &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: macvirtv1alpha1.MacMachineStatus{Phase: phase}}
	}
	stopFailed := mk("team", "e", macvirtv1alpha1.MachineTerminating)
	stopFailed.Status.Conditions = []metav1.Condition{
		{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonDeleting},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonStopFailed}}
	ready := mk("pools", "a", macvirtv1alpha1.MachineReady)
	ready.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected},
		{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonAsExpected}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		ready, mk("pools", "b", macvirtv1alpha1.MachineReady),
		mk("pools", "c", macvirtv1alpha1.MachineProvisioning), mk("team", "d", ""), stopFailed).Build()
	want := `
# HELP macvirt_machines MacMachines by namespace and phase, as the operator's cache holds them.
# TYPE macvirt_machines gauge
macvirt_machines{machine_namespace="pools",phase="Provisioning"} 1
macvirt_machines{machine_namespace="pools",phase="Ready"} 2
macvirt_machines{machine_namespace="team",phase="Pending"} 1
macvirt_machines{machine_namespace="team",phase="Terminating"} 1
# HELP macvirt_machine_conditions MacMachines by the status and reason of their Ready and Stalled conditions, as the operator's cache holds them.
# TYPE macvirt_machine_conditions gauge
macvirt_machine_conditions{condition="Ready",reason="AsExpected",status="True"} 1
macvirt_machine_conditions{condition="Ready",reason="Deleting",status="False"} 1
macvirt_machine_conditions{condition="Stalled",reason="AsExpected",status="False"} 1
macvirt_machine_conditions{condition="Stalled",reason="StopFailed",status="True"} 1
`
	if err := testutil.CollectAndCompare(&machineCollector{reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestSlotsCollectorReportsEachAppleNode(t *testing.T) {
	node := func(name string, apple bool, slots string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if apple {
			n.Labels = map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}
		}
		n.Status.Allocatable = corev1.ResourceList{macvirtv1alpha1.ResourceMacOSSlots: resource.MustParse(slots)}
		return n
	}
	vmi := func(name, node string, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "pools", Name: name}}
		v.Spec.Domain.Resources.Requests = corev1.ResourceList{macvirtv1alpha1.ResourceMacOSSlots: resource.MustParse("1")}
		v.Status.NodeName, v.Status.Phase = node, phase
		return v
	}
	// The operator's cache, with its index of instances by node.
	cordoned := node("mac-2", true, "1")
	cordoned.Spec.Unschedulable = true
	c := controllertest.FakeClient(t, node("mac-1", true, "2"), cordoned, node("linux", false, "5"),
		vmi("a", "mac-1", kubevirtv1.Running), vmi("b", "mac-1", kubevirtv1.Scheduled), vmi("c", "mac-2", kubevirtv1.Succeeded))
	want := `
# HELP macvirt_node_macos_slots macOS slots each Apple node advertises (its allocatable macvirt.io/macos-slots).
# TYPE macvirt_node_macos_slots gauge
macvirt_node_macos_slots{node="mac-1"} 2
macvirt_node_macos_slots{node="mac-2"} 1
# HELP macvirt_node_macos_slots_used macOS slots held on each Apple node by unfinished VirtualMachineInstances that request one.
# TYPE macvirt_node_macos_slots_used gauge
macvirt_node_macos_slots_used{node="mac-1"} 2
macvirt_node_macos_slots_used{node="mac-2"} 0
# HELP macvirt_node_cordoned 1 while an Apple node is cordoned (spec.unschedulable): its free macOS slots take no new Mac.
# TYPE macvirt_node_cordoned gauge
macvirt_node_cordoned{node="mac-1"} 0
macvirt_node_cordoned{node="mac-2"} 1
`
	if err := testutil.CollectAndCompare(&slotsCollector{reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestHostCollectorReportsEachMacHost(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	up := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-a"}, Status: macvirtv1alpha1.MacHostStatus{
		Agent: &macvirtv1alpha1.HostAgentReport{Slots: 2}, Machines: 1,
		Conditions: []metav1.Condition{cond("Ready", metav1.ConditionTrue, "AsExpected"), cond("Schedulable", metav1.ConditionTrue, "AsExpected")}}}
	lost := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-b"}, Status: macvirtv1alpha1.MacHostStatus{
		Agent: &macvirtv1alpha1.HostAgentReport{Slots: 2}, Machines: 2,
		Conditions: []metav1.Condition{cond("Ready", metav1.ConditionUnknown, macvirtv1alpha1.ReasonHostLost),
			cond("Schedulable", metav1.ConditionFalse, macvirtv1alpha1.ReasonHostLost)}}}
	unregistered := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-c"}}
	c := controllertest.FakeClient(t, up, lost, unregistered)
	want := `
# HELP macvirt_host_slots macOS VMs each Apple-silicon MacHost may run at once, as its host agent reports.
# TYPE macvirt_host_slots gauge
macvirt_host_slots{host="mac-a"} 2
macvirt_host_slots{host="mac-b"} 2
macvirt_host_slots{host="mac-c"} 0
# HELP macvirt_host_machines MacMachines placed on each MacHost.
# TYPE macvirt_host_machines gauge
macvirt_host_machines{host="mac-a"} 1
macvirt_host_machines{host="mac-b"} 2
macvirt_host_machines{host="mac-c"} 0
# HELP macvirt_host_condition 1 for each MacHost's Ready and Schedulable condition, labelled with its status and reason.
# TYPE macvirt_host_condition gauge
macvirt_host_condition{condition="Ready",host="mac-a",reason="AsExpected",status="True"} 1
macvirt_host_condition{condition="Schedulable",host="mac-a",reason="AsExpected",status="True"} 1
macvirt_host_condition{condition="Ready",host="mac-b",reason="HostLost",status="Unknown"} 1
macvirt_host_condition{condition="Schedulable",host="mac-b",reason="HostLost",status="False"} 1
`
	if err := testutil.CollectAndCompare(&hostCollector{reader: c}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A deleted pool's series go: they would report its last counts for as
// long as the operator runs.
func TestPhaseDurations(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	count := func(h prometheus.Histogram) uint64 {
		var out dto.Metric
		if err := h.Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetHistogram().GetSampleCount()
	}
	status := func(phase macvirtv1alpha1.MachinePhase, reason string) *macvirtv1alpha1.MacMachineStatus {
		return &macvirtv1alpha1.MacMachineStatus{Phase: phase, Conditions: []metav1.Condition{
			{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}}}
	}
	p0, b0 := count(machineProvisionSeconds), count(machineBootSeconds)
	m.Status.Phase = macvirtv1alpha1.MachineStarting
	ObservePhaseDurations(status(macvirtv1alpha1.MachineProvisioning, macvirtv1alpha1.ReasonProvisioning), m, created.Add(10*time.Minute))
	running := metav1.NewTime(created.Add(11 * time.Minute))
	m.Status.Phase, m.Status.RunningSince = macvirtv1alpha1.MachineReady, &running
	ObservePhaseDurations(status(macvirtv1alpha1.MachineBooting, macvirtv1alpha1.ReasonBooting), m, created.Add(12*time.Minute))
	// Days later: the heartbeat went stale, and came back.
	ObservePhaseDurations(status(macvirtv1alpha1.MachineBooting, macvirtv1alpha1.ReasonHeartbeatStale), m, created.Add(72*time.Hour))
	m.Status.Phase = macvirtv1alpha1.MachineStopping
	ObservePhaseDurations(status(macvirtv1alpha1.MachineReady, macvirtv1alpha1.ReasonAsExpected), m, created.Add(73*time.Hour))
	if p, b := count(machineProvisionSeconds)-p0, count(machineBootSeconds)-b0; p != 1 || b != 1 {
		t.Errorf("observed %d provisionings and %d boots; want 1 and 1", p, b)
	}
}

// Claims by phase, and the oldest one without a machine: bound claims and
// claims being deleted do not wait.
func TestClaimCollector(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	claim := func(name string, age time.Duration, phase macvirtv1alpha1.ClaimPhase, bound bool) *macvirtv1alpha1.MacClaim {
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		c.Status.Phase = phase
		if bound {
			c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "pools", Name: name, UID: "u"}
		}
		return c
	}
	c := controllertest.FakeClient(t, claim("old-bound", time.Hour, macvirtv1alpha1.ClaimReady, true), claim("waiting", 20*time.Minute, macvirtv1alpha1.ClaimPending, false),
		claim("new", time.Minute, "", false))
	want := `
# HELP macvirt_claim_oldest_waiting_seconds Age of the oldest MacClaim that has no machine yet (0 when none waits).
# TYPE macvirt_claim_oldest_waiting_seconds gauge
macvirt_claim_oldest_waiting_seconds 1200
# HELP macvirt_claims MacClaims by phase, as the operator's cache holds them.
# TYPE macvirt_claims gauge
macvirt_claims{phase="Pending"} 2
macvirt_claims{phase="Ready"} 1
`
	if err := testutil.CollectAndCompare(&claimCollector{reader: c, now: func() time.Time { return now }}, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
