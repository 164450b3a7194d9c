package claim

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/tenancy"
)

func trustPool() *macvirtv1alpha1.MacPool {
	return &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci", UID: "pool-uid"},
		Spec: macvirtv1alpha1.MacPoolSpec{Namespace: "macvirt-pools", ClassName: "sonoma"}}
}

// trustMachine is an idle, Ready machine as the pool makes it; mods make it
// something else.
func trustMachine(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "ci-0", Namespace: "macvirt-pools",
			Labels:          map[string]string{macvirtv1alpha1.LabelPool: "ci"},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacPool", "ci", "pool-uid")}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "sonoma"},
	}
	m.Status.Phase = macvirtv1alpha1.MachineReady
	m.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}
	for _, mod := range mods {
		mod(m)
	}
	return m
}

// A machine made by hand, labelled for a pool, must never be handed to a
// claim: only the pool's own machines, in its namespace, are.
func TestOnlyAPoolsOwnMachinesAreBindable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		machine  *macvirtv1alpha1.MacMachine
		indexed  bool
		heldByIt bool
	}{
		{"made by the pool", trustMachine(), true, true},
		{"made by hand in a tenant's namespace, labelled for the pool", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Namespace, m.OwnerReferences = "tenant-b", nil
		}), false, false},
		{"made by hand with an owner reference naming the pool, in another namespace", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Namespace = "tenant-b"
		}), true, false},
		{"controlled by another object of the pool's name and kind (another UID)", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = []metav1.OwnerReference{base.ControllerRef("MacPool", "ci", "forged-uid")}
		}), true, false},
		{"controlled by the pool's UID under another group (apiVersion spelt \"macvirt.io\")", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences[0].APIVersion = "macvirt.io"
		}), false, false},
		{"controlled by a claim", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = []metav1.OwnerReference{base.ControllerRef("MacClaim", "ci", "claim-uid")}
		}), false, false},
		{"labelled for another pool", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Labels[macvirtv1alpha1.LabelPool] = "other"
		}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(index.BindableKeys(tc.machine)) > 0; got != tc.indexed {
				t.Errorf("indexed as bindable: %v, want %v", got, tc.indexed)
			}
			if got := tenancy.PoolHolds(trustPool(), tc.machine); got != tc.heldByIt {
				t.Errorf("PoolHolds: %v, want %v", got, tc.heldByIt)
			}
		})
	}
	if tenancy.PoolHolds(nil, trustMachine()) {
		t.Error("a machine of a pool that does not exist is held by it")
	}
}

// A machine whose claimRef names a claim is adopted by the claim only when
// it could have been made for it: on demand in the claim's namespace, or by
// a pool in that pool's namespace.
func TestAClaimAdoptsOnlyMachinesMadeForIt(t *testing.T) {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "tenant-a", UID: "claim-uid"}}
	for _, tc := range []struct {
		name    string
		machine *macvirtv1alpha1.MacMachine
		pool    *macvirtv1alpha1.MacPool
		want    bool
	}{
		{"made on demand in the claim's namespace", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Namespace, m.Labels = "tenant-a", nil
		}), nil, true},
		{"a pool's, bound (no owner any more), in the pool's namespace", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = nil
		}), trustPool(), true},
		{"in a third tenant's namespace, labelled for the pool", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Namespace = "tenant-b"
		}), trustPool(), false},
		{"in a third tenant's namespace, labelled for no pool", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Namespace, m.Labels = "tenant-b", nil
		}), nil, false},
		{"labelled for a pool that does not exist", trustMachine(), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tenancy.MayServe(tc.machine, claim.Namespace, tc.pool); got != tc.want {
				t.Errorf("MayServe: %v, want %v", got, tc.want)
			}
		})
	}
}

// Rendezvous order: the same claim puts the same machine first whatever
// order the cache lists them in and whichever other machines it lists;
// different claims start at different machines; every machine comes once.
func TestCandidateOrder(t *testing.T) {
	machines := func(names ...string) []*macvirtv1alpha1.MacMachine {
		out := make([]*macvirtv1alpha1.MacMachine, 0, len(names))
		for _, n := range names {
			out = append(out, &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "pools"}})
		}
		return out
	}
	order := func(uid types.UID, ms []*macvirtv1alpha1.MacMachine) []string {
		var out []string
		for m := range candidateOrder(uid, ms) {
			out = append(out, m.Name)
		}
		return out
	}
	names := make([]string, 50)
	for i := range names {
		names[i] = fmt.Sprintf("m-%d", i)
	}
	forward := order("claim-a", machines(names...))
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	if got := order("claim-a", machines(reversed...)); !slices.Equal(got, forward) {
		t.Errorf("the order depends on the listing: %v, then %v", forward[:5], got[:5])
	}
	if got := slices.Sorted(slices.Values(forward)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("not every machine exactly once: %v", forward)
	}
	// A cache that lists one machine fewer (not the first) or one more puts
	// the same machine first.
	fewer := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == forward[1] })
	if got := order("claim-a", machines(fewer...)); got[0] != forward[0] {
		t.Errorf("one machine fewer moved the first choice from %s to %s", forward[0], got[0])
	}
	if got := order("claim-a", machines(append(slices.Clone(names), "m-new")...)); got[0] != forward[0] && got[0] != "m-new" {
		t.Errorf("one machine more moved the first choice from %s to %s", forward[0], got[0])
	}
	firsts := map[string]bool{}
	for i := range 20 {
		firsts[order(types.UID(fmt.Sprintf("claim-%d", i)), machines(names...))[0]] = true
	}
	if len(firsts) < 10 {
		t.Errorf("20 claims start at only %d different machines of 50: %v", len(firsts), firsts)
	}
	// Stopping early stops: a bind that wins its first machine looks no
	// further.
	for m := range candidateOrder("claim-a", machines(names...)) {
		if m.Name != forward[0] {
			t.Errorf("first yielded %s, want %s", m.Name, forward[0])
		}
		break
	}
	if got := order("claim-a", nil); len(got) != 0 {
		t.Errorf("no machines yielded %v", got)
	}
}

func TestTieredOrder(t *testing.T) {
	mk := func(name, host string, phase macvirtv1alpha1.MachinePhase) *macvirtv1alpha1.MacMachine {
		m := &macvirtv1alpha1.MacMachine{}
		m.Name, m.Spec.HostName, m.Status.Phase = name, host, phase
		return m
	}
	machines := []*macvirtv1alpha1.MacMachine{
		mk("s-full", "full", macvirtv1alpha1.MachineSuspended),
		mk("s-free", "free", macvirtv1alpha1.MachineSuspended),
		mk("running", "full", macvirtv1alpha1.MachineReady),
		mk("s-unread", "unread", macvirtv1alpha1.MachineSuspended),
	}
	var got []string
	order, skipped := tieredOrder("claim-1", machines, map[string]int{"full": 0, "free": 1})
	for m := range order {
		got = append(got, m.Name)
	}
	if len(got) != 2 || got[0] != "running" || got[1] != "s-free" {
		t.Fatalf("order %v: want the running machine, then the suspended one whose host has a free slot, and no other", got)
	}
	if skipped != 2 {
		t.Fatalf("%d skipped; want the 2 suspended on hosts with no free slot (one host full, one not read)", skipped)
	}
}
