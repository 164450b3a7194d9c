package pool

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func machines(state machineState, rev string, names ...string) []poolMachine {
	out := make([]poolMachine, 0, len(names))
	for _, n := range names {
		out = append(out, poolMachine{Name: n, Revision: rev, State: state})
	}
	return out
}

func join(parts ...[]poolMachine) []poolMachine { return slices.Concat(parts...) }

func TestPlanPool(t *testing.T) {
	cases := map[string]struct {
		in             poolInput
		create, delete []string
	}{
		"empty pool fills up to maxProvisioning": {
			in:     poolInput{Idle: 3, Max: 10, MaxProv: 2},
			create: []string{"p-0", "p-1"}},
		"provisioning machines count as supply": {
			in:     poolInput{Idle: 3, Max: 10, MaxProv: 5, Machines: machines(stateProvisioning, "r1", "p-0", "p-1")},
			create: []string{"p-2"}},
		"never above maxMachines, terminating included": {
			in: poolInput{Idle: 3, Max: 4, MaxProv: 5, Machines: join(
				machines(stateBound, "r1", "p-0", "p-1"), machines(stateTerminating, "r1", "p-2"))},
			create: []string{"p-3"}},
		"slots beyond the cap are never used": {
			in:     poolInput{Idle: 2, Max: 2, MaxProv: 2, Machines: machines(stateBound, "r1", "p-5")},
			create: []string{"p-0"}},
		"a full pool creates nothing": {
			in: poolInput{Idle: 2, Max: 2, MaxProv: 2, Machines: machines(stateIdle, "r1", "p-0", "p-1")}},
		"unbound machines on a draining node are deleted at once and replaced": {
			in: poolInput{Idle: 2, Max: 10, MaxProv: 2, Machines: join(
				machines(stateDraining, "r1", "p-0", "p-1"), machines(stateBound, "r1", "p-2"))},
			create: []string{"p-3", "p-4"}, delete: []string{"p-0", "p-1"}},
		"a paused pool deletes nothing on a draining node": {
			in: poolInput{Idle: 1, Max: 10, MaxProv: 2, Paused: true, Machines: machines(stateDraining, "r1", "p-0")}},
		"failed machines are deleted and replaced once gone": {
			in:     poolInput{Idle: 1, Max: 1, MaxProv: 1, Machines: machines(stateFailed, "r1", "p-0")},
			delete: []string{"p-0"}},
		"unhealthy machines are replaced one provisioning slot at a time": {
			in: poolInput{Idle: 6, Max: 12, MaxProv: 2, Machines: join(
				machines(stateIdle, "r1", "p-0", "p-1", "p-2"), machines(stateFailed, "r1", "p-3", "p-4"), machines(stateProvisioning, "r1", "p-5"))},
			create: []string{"p-6"}, delete: []string{"p-3"}},
		"machines still terminating take provisioning slots from replacements": {
			in: poolInput{Idle: 4, Max: 8, MaxProv: 2, Machines: join(machines(stateIdle, "r1", "p-0", "p-1", "p-2"),
				machines(stateTerminating, "r1", "p-3", "p-4"), machines(stateFailed, "r1", "p-5"))},
			create: []string{"p-6"}},
		"more unhealthy than maxUnhealthy (50%): none replaced": {
			in: poolInput{Idle: 4, Max: 8, MaxProv: 4, Machines: join(
				machines(stateIdle, "r1", "p-0"), machines(stateFailed, "r1", "p-1", "p-2", "p-3"))}},
		"unhealthy machines held back still leave room to reach the target": {
			in: poolInput{Idle: 5, Max: 10, MaxProv: 4, Machines: join(
				machines(stateIdle, "r1", "p-0"), machines(stateFailed, "r1", "p-1", "p-2", "p-3"))},
			create: []string{"p-4"}},
		"an operator-set maxUnhealthy of 100% replaces them all": {
			in: poolInput{Idle: 3, Max: 6, MaxProv: 3, MaxUnhealthy: ptr.To(intstr.FromString("100%")),
				Machines: machines(stateFailed, "r1", "p-0", "p-1", "p-2")},
			create: []string{"p-3", "p-4", "p-5"}, delete: []string{"p-0", "p-1", "p-2"}},
		"a silent guest is neither deleted nor backfilled during its grace": {
			in: poolInput{Idle: 3, Max: 6, MaxProv: 2, Now: t0, Machines: join(machines(stateIdle, "r1", "p-0", "p-1"),
				[]poolMachine{{Name: "p-2", Revision: "r1", State: stateFailed, ReplaceAt: t0.Add(time.Second)}})}},
		"a silent guest is replaced after its grace": {
			in: poolInput{Idle: 3, Max: 6, MaxProv: 2, Now: t0.Add(time.Second), Machines: join(machines(stateIdle, "r1", "p-0", "p-1"),
				[]poolMachine{{Name: "p-2", Revision: "r1", State: stateFailed, ReplaceAt: t0.Add(time.Second)}})},
			create: []string{"p-3"}, delete: []string{"p-2"}},
		"released machines are outside the cap, and their slots stay taken": {
			in: poolInput{Idle: 1, Max: 2, MaxProv: 2, Machines: join(
				machines(stateReleased, "r1", "p-0", "p-1"), machines(stateBound, "r1", "p-2"))},
			create: []string{"p-3"}},
		"maxUnhealthy 0 replaces none": {
			in: poolInput{Idle: 1, Max: 2, MaxProv: 1, MaxUnhealthy: ptr.To(intstr.FromInt32(0)),
				Machines: machines(stateFailed, "r1", "p-0")}},
		"scale-down deletes idle only, newest slots first": {
			in: poolInput{Idle: 1, Max: 10, MaxProv: 2, Machines: join(
				machines(stateIdle, "r1", "p-0", "p-1", "p-2"), machines(stateProvisioning, "r1", "p-3"), machines(stateBound, "r1", "p-4"))},
			delete: []string{"p-2", "p-1"}},
		"scale-down deletes old revisions first": {
			in: poolInput{Idle: 1, Max: 10, MaxProv: 2, Machines: join(
				machines(stateIdle, "r1", "p-0"), machines(stateIdle, "r0", "p-1"))},
			delete: []string{"p-1"}},
		"rolling: surge a replacement before deleting an old idle machine": {
			in:     poolInput{Idle: 2, Max: 10, MaxProv: 2, Machines: machines(stateIdle, "r0", "p-0", "p-1")},
			create: []string{"p-2", "p-3"}},
		"rolling: delete old idle machines once replacements are Ready": {
			in: poolInput{Idle: 2, Max: 10, MaxProv: 2, Machines: join(
				machines(stateIdle, "r0", "p-0", "p-1"), machines(stateIdle, "r1", "p-2", "p-3"))},
			delete: []string{"p-1", "p-0"}},
		"rolling: no surge past the cap": {
			in: poolInput{Idle: 2, Max: 2, MaxProv: 2, Machines: machines(stateIdle, "r0", "p-0", "p-1")}},
		"paused does nothing": {
			in: poolInput{Idle: 3, Max: 10, MaxProv: 2, Paused: true, Machines: machines(stateFailed, "r1", "p-0")}},
		"bound machines never return to idle": {
			in:     poolInput{Idle: 1, Max: 10, MaxProv: 2, Machines: machines(stateBound, "r1", "p-0", "p-1")},
			create: []string{"p-2"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.in.Pool, tc.in.Revision = "p", "r1"
			got := planPool(tc.in)
			if !slices.Equal(got.Create, tc.create) || !slices.Equal(got.Delete, tc.delete) {
				t.Errorf("plan = %s, want create %v, delete %v", describePlan(got), tc.create, tc.delete)
			}
		})
	}
}

// TestPlanPoolNeverExceedsTheCap replays many plans, applying each, and
// checks the invariant the pool promises.
func TestPlanPoolNeverExceedsTheCap(t *testing.T) {
	for maxM := int32(0); maxM <= 6; maxM++ {
		for idle := int32(0); idle <= maxM; idle++ {
			in := poolInput{Pool: "p", Idle: idle, Max: maxM, MaxProv: 2, Revision: "r1"}
			for step := range 20 {
				plan := planPool(in)
				for _, n := range plan.Create {
					in.Machines = append(in.Machines, poolMachine{Name: n, Revision: "r1", State: stateProvisioning})
				}
				if len(in.Machines) > int(maxM) {
					t.Fatalf("idle=%d max=%d step %d: %d machines", idle, maxM, step, len(in.Machines))
				}
				// Every other step, provisioning machines become Ready and one gets bound.
				for i := range in.Machines {
					if in.Machines[i].State == stateProvisioning && step%2 == 1 {
						in.Machines[i].State = stateIdle
					}
				}
				if step%3 == 2 {
					for i := range in.Machines {
						if in.Machines[i].State == stateIdle {
							in.Machines[i].State = stateBound
							break
						}
					}
				}
			}
		}
	}
}

func TestSlotOf(t *testing.T) {
	for name, want := range map[string]int{"p-0": 0, "p-12": 12, "p-x": -1, "p-01": -1, "q-1": -1, "p--1": -1} {
		got, ok := slotOf("p", name)
		if (want < 0 && ok) || (want >= 0 && (!ok || got != want)) {
			t.Errorf("slotOf(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

func TestPoolMachineStateReplacesAMachineWhoseAgentFellSilent(t *testing.T) {
	cond := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: macvirtv1alpha1.ConditionGuestAgentReady, Status: metav1.ConditionFalse, Reason: reason}}
	}
	for name, tc := range map[string]struct {
		m    macvirtv1alpha1.MacMachine
		want machineState
	}{
		"silent past heartbeatTimeout": {macvirtv1alpha1.MacMachine{Status: macvirtv1alpha1.MacMachineStatus{
			Phase: macvirtv1alpha1.MachineBooting, Conditions: cond(macvirtv1alpha1.ReasonHeartbeatStale)}}, stateFailed},
		"still booting": {macvirtv1alpha1.MacMachine{Status: macvirtv1alpha1.MacMachineStatus{
			Phase: macvirtv1alpha1.MachineBooting, Conditions: cond(macvirtv1alpha1.ReasonBooting)}}, stateProvisioning},
		"silent but bound": {macvirtv1alpha1.MacMachine{Spec: macvirtv1alpha1.MacMachineSpec{ClaimRef: &macvirtv1alpha1.ObjectRef{Name: "c"}},
			Status: macvirtv1alpha1.MacMachineStatus{Conditions: cond(macvirtv1alpha1.ReasonHeartbeatStale)}}, stateBound},
	} {
		if got := poolMachineState(&tc.m); got != tc.want {
			t.Errorf("%s: state %d, want %d", name, got, tc.want)
		}
	}
}

// A Mac whose host now caches a newer digest of its class's image (a
// refresh pulled a re-pushed tag) is of an older revision: the pool
// replaces it while idle, as after a class change; one whose tool does not
// say is left alone.
func TestARefreshedImageRollsIdleMacsOnHosts(t *testing.T) {
	machine := func(name, digest, latest string) macvirtv1alpha1.MacMachine {
		m := macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: name}}
		m.Spec.ClassRevision, m.Spec.HostName = "r1", "mac-a"
		m.Status.Host = &macvirtv1alpha1.HostVMStatus{ImageDigest: digest, LatestImageDigest: latest}
		return m
	}
	for _, c := range []struct {
		m    macvirtv1alpha1.MacMachine
		want string
	}{
		{machine("same", "sha256:a", "sha256:a"), "r1"},
		{machine("re-pushed", "sha256:a", "sha256:b"), "r1@sha256:a"},
		{machine("lume", "", ""), "r1"},
		{machine("not refreshed", "sha256:a", ""), "r1"},
	} {
		if got := machineRevision(&c.m); got != c.want {
			t.Errorf("%s: revision %q, want %q", c.m.Name, got, c.want)
		}
	}
	in := poolInput{Pool: "p", Idle: 1, Max: 4, MaxProv: 2, Revision: "r1",
		Machines: []poolMachine{{Name: "p-0", Revision: machineRevision(ptr.To(machine("p-0", "sha256:a", "sha256:b"))), State: stateIdle}}}
	plan := planPool(in)
	if len(plan.Create) != 1 || len(plan.Delete) != 0 {
		t.Fatalf("one idle Mac of an old digest: create %v, delete %v; want a replacement first", plan.Create, plan.Delete)
	}
	in.Machines = append(in.Machines, poolMachine{Name: "p-1", Revision: "r1", State: stateIdle})
	plan = planPool(in)
	if len(plan.Create) != 0 || !slices.Equal(plan.Delete, []string{"p-0"}) {
		t.Fatalf("its replacement Ready: create %v, delete %v; want the old one deleted", plan.Create, plan.Delete)
	}
}
