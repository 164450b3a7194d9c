package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
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
			OwnerReferences: []metav1.OwnerReference{controllerRef("MacPool", "ci", "pool-uid")}},
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
			m.OwnerReferences = []metav1.OwnerReference{controllerRef("MacPool", "ci", "forged-uid")}
		}), true, false},
		{"controlled by the pool's UID under another group (apiVersion spelt \"macvirt.io\")", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences[0].APIVersion = "macvirt.io"
		}), false, false},
		{"controlled by a claim", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = []metav1.OwnerReference{controllerRef("MacClaim", "ci", "claim-uid")}
		}), false, false},
		{"labelled for another pool", trustMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Labels[macvirtv1alpha1.LabelPool] = "other"
		}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(bindableKeys(tc.machine)) > 0; got != tc.indexed {
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
