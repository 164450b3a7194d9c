package claim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

func boundClaim(machine *macvirtv1alpha1.MacMachine) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", UID: "claim-uid"}}
	c.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: machine.Namespace, Name: machine.Name, UID: machine.UID}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
		Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonBound})
	return c
}

// The claim's and the machine's watches are not ordered: a cache may show
// the claim bound and the machine not yet. That is no lost machine.
func TestFindBoundDoesNotLoseAClaimToACacheThatLagsTheMachine(t *testing.T) {
	stale := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools", UID: "m-uid",
		Labels: map[string]string{macvirtv1alpha1.LabelPool: "ci"}}}
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Spec: macvirtv1alpha1.MacPoolSpec{Namespace: "pools"}}
	claim := boundClaim(stale)
	fresh := stale.DeepCopy()
	fresh.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	r := &Reconciler{Client: controllertest.FakeClient(t, stale, pool), APIReader: controllertest.FakeClient(t, fresh)}
	s := &claimScope{claim: claim}
	if _, err := r.findBound(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if s.lost != "" || s.machine == nil || s.machine.Name != "m" {
		t.Errorf("findBound: lost %q, machine %v; want the machine, not lost", s.lost, s.machine)
	}
}

// A claim deleted while the cache still shows it must not reserve, and so
// must not bind or create, anything.
func TestAReservationForADeletedClaimFails(t *testing.T) {
	r := &Reconciler{Client: controllertest.FakeClient(t)}
	s := &claimScope{claim: &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "team", UID: "u", ResourceVersion: "7"}}}
	err := r.writeReservation(context.Background(), s, &macvirtv1alpha1.ObjectRef{Namespace: "pools", Name: "m", UID: "m-uid"},
		macvirtv1alpha1.ReasonBinding, "reserved")
	if !apierrors.IsNotFound(err) {
		t.Errorf("writeReservation for a deleted claim = %v, want NotFound", err)
	}
	if s.claim.Status.MachineRef != nil {
		t.Errorf("the scope's claim names %v, want nothing", s.claim.Status.MachineRef)
	}
}

// The Retain bound counts bindings other claims have begun: a reservation,
// or a commitment to a machine made on demand.
func TestTheRetainBoundCountsBindingsInProgress(t *testing.T) {
	allow, one := true, int32(1)
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "mac"}}
	class.Spec.Tenancy.AllowRetain, class.Spec.Tenancy.MaxReleasedPerNamespace = &allow, &one
	committed := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "team", UID: "first-uid"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "mac", ReclaimPolicy: macvirtv1alpha1.ReclaimRetain}}
	meta.SetStatusCondition(&committed.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
		Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonBinding})
	other := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "team", UID: "second-uid"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "mac", ReclaimPolicy: macvirtv1alpha1.ReclaimRetain}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	r := &Reconciler{Client: controllertest.FakeClient(t, ns, committed, other), Clock: clock.RealClock{}}
	p, err := r.checkTenancy(context.Background(), other, class)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil || p.Reason != macvirtv1alpha1.ReasonTooManyReleased {
		t.Errorf("checkTenancy = %+v, want TooManyReleased: the first claim's binding is under way", p)
	}
	if p, _ := r.checkTenancy(context.Background(), committed, class); p != nil {
		t.Errorf("checkTenancy of the committed claim itself = %+v, want none: it does not count against itself", p)
	}
}

// A reservation made before pools' own machines were told from others may
// name a machine made by hand and labelled for a pool: completing the bind
// undoes it instead, and the machine is never bound.
func TestAReservationOfAMachineItsPoolDidNotMakeIsUndone(t *testing.T) {
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci", UID: "pool-uid"}, Spec: macvirtv1alpha1.MacPoolSpec{Namespace: "pools"}}
	decoy := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "decoy", Namespace: "pools", UID: "decoy-uid",
		Labels: map[string]string{macvirtv1alpha1.LabelPool: "ci"}}}
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "team", UID: "claim-uid"}}
	claim.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: decoy.Namespace, Name: decoy.Name, UID: decoy.UID}
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound,
		Status: metav1.ConditionFalse, Reason: macvirtv1alpha1.ReasonBinding, Message: "reserved"})
	c := controllertest.FakeClient(t, pool, decoy, claim)
	r := &Reconciler{Client: c, APIReader: c}
	s := &claimScope{claim: &macvirtv1alpha1.MacClaim{}}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), s.claim); err != nil {
		t.Fatal(err)
	}
	if proceed, err := r.completeBind(context.Background(), s); proceed || err != nil {
		t.Fatalf("completeBind = %v, %v; want the reservation undone", proceed, err)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatal(err)
	}
	bound := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionBound)
	if got.Status.MachineRef != nil || bound == nil || bound.Reason != macvirtv1alpha1.ReasonWaitingForMachine ||
		bound.Message != "reserved machine pools/decoy was not made by its pool for claims; looking for another" {
		t.Errorf("claim status %+v, Bound %+v; want the reservation cleared, saying why", got.Status.MachineRef, bound)
	}
	m := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(decoy), m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.ClaimRef != nil {
		t.Errorf("the decoy was bound to %+v", m.Spec.ClaimRef)
	}
}

// A machine made by hand in another namespace, naming a claim of the
// namespace and retained, does not count against the namespace's
// maxReleasedPerNamespace: an attacker cannot fill a tenant's quota.
func TestTheRetainBoundCountsOnlyMachinesThatCanBeTheNamespaces(t *testing.T) {
	allow, one := true, int32(1)
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "mac"}}
	class.Spec.Tenancy.AllowRetain, class.Spec.Tenancy.MaxReleasedPerNamespace = &allow, &one
	retained := func(ns string) *macvirtv1alpha1.MacMachine {
		return &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns, UID: "kept-uid",
			Annotations: map[string]string{macvirtv1alpha1.AnnotationReclaimPolicy: string(macvirtv1alpha1.ReclaimRetain)}},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: "mac",
				ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: "team", Name: "old", UID: "old-uid"}}}
	}
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "team", UID: "new-uid"},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "mac", ReclaimPolicy: macvirtv1alpha1.ReclaimRetain}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	for where, want := range map[string]string{"team": macvirtv1alpha1.ReasonTooManyReleased, "evil": ""} {
		r := &Reconciler{Client: controllertest.FakeClient(t, ns, claim.DeepCopy(), retained(where)), Clock: clock.RealClock{}}
		p, err := r.checkTenancy(context.Background(), claim, class)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if p != nil {
			got = p.Reason
		}
		if got != want {
			t.Errorf("a retained machine in %s: checkTenancy = %+v, want reason %q", where, p, want)
		}
	}
}
