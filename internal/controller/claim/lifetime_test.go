package claim

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestLifetimeIsTheClaimsCappedByItsClass(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	for _, tc := range []struct {
		name       string
		asked, max *metav1.Duration
		noClass    bool
		want       time.Duration
	}{
		{name: "neither: no lifetime"},
		{name: "the claim's", asked: d(8 * time.Hour), want: 8 * time.Hour},
		{name: "under the cap: the claim's", asked: d(time.Hour), max: d(8 * time.Hour), want: time.Hour},
		{name: "over the cap: the cap", asked: d(24 * time.Hour), max: d(8 * time.Hour), want: 8 * time.Hour},
		{name: "none asked: the cap", max: d(8 * time.Hour), want: 8 * time.Hour},
		{name: "no class known: the claim's", asked: d(time.Hour), noClass: true, want: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &macvirtv1alpha1.MacClaim{Spec: macvirtv1alpha1.MacClaimSpec{Lifetime: tc.asked}}
			var class *macvirtv1alpha1.MacClass
			if !tc.noClass {
				class = &macvirtv1alpha1.MacClass{}
				class.Spec.Tenancy.MaxClaimLifetime = tc.max
			}
			if got := lifetimeOf(claim, class); got != tc.want {
				t.Errorf("lifetimeOf = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestExpiryWarningAndEnd(t *testing.T) {
	bound := metav1.NewTime(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	at := bound.Add
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		now      time.Duration // after binding
		phase    macvirtv1alpha1.ClaimPhase
		warn     bool
		expired  bool
		next     time.Duration
	}{
		{name: "8h: warned 15m before, not sooner", lifetime: 8 * time.Hour, now: 7*time.Hour + 44*time.Minute, next: time.Minute},
		{name: "8h: within the warning", lifetime: 8 * time.Hour, now: 7*time.Hour + 50*time.Minute, warn: true, next: 10 * time.Minute},
		{name: "1h: warned a tenth before", lifetime: time.Hour, now: 53 * time.Minute, next: time.Minute},
		{name: "1h: within the warning", lifetime: time.Hour, now: 55 * time.Minute, warn: true, next: 5 * time.Minute},
		{name: "over: expired, looked at now", lifetime: time.Hour, now: time.Hour, expired: true, next: time.Nanosecond},
		{name: "said Expired: nothing more to do", lifetime: time.Hour, now: 2 * time.Hour, phase: macvirtv1alpha1.ClaimExpired, expired: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &macvirtv1alpha1.MacClaim{}
			c.Status.Phase = tc.phase
			c.Status.BoundAt = &bound
			c.Status.ExpiresAt = expiresAt(bound, tc.lifetime)
			now := at(tc.now)
			note, warn := expiryWarning(c, now)
			if warn != tc.warn {
				t.Errorf("warned %v, want %v (%q)", warn, tc.warn, note)
			}
			if warn && (!strings.Contains(note, c.Status.ExpiresAt.UTC().Format(time.RFC3339)) || !strings.Contains(note, "reclaimPolicy Delete")) {
				t.Errorf("warning %q names neither the end nor what happens then", note)
			}
			if got := expired(&c.Status, now); got != tc.expired {
				t.Errorf("expired = %v, want %v", got, tc.expired)
			}
			if got := lifetimeNext(&c.Status, now); got != tc.next {
				t.Errorf("next look in %s, want %s", got, tc.next)
			}
		})
	}
	if expiresAt(bound, 0) != nil {
		t.Error("a claim without a lifetime expires")
	}
	if expired(&macvirtv1alpha1.MacClaimStatus{}, time.Now()) || lifetimeNext(&macvirtv1alpha1.MacClaimStatus{}, time.Now()) != 0 {
		t.Error("a claim without a lifetime is looked at for it")
	}
}

func TestAClaimsLifetimeIsFixedWhenBoundAndEndsInExpired(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	class := &macvirtv1alpha1.MacClass{}
	class.Spec.Tenancy.MaxClaimLifetime = &metav1.Duration{Duration: 2 * time.Hour}
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "c1"},
		Spec: macvirtv1alpha1.MacClaimSpec{Lifetime: &metav1.Duration{Duration: 3 * time.Hour}}}
	machine := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "mac-1", Namespace: "pools", UID: "m1"}}
	machine.Status.Phase = macvirtv1alpha1.MachineBooting

	st := computeClaimStatus(&claimScope{claim: claim, class: class, machine: machine}, now)
	if st.BoundAt == nil || st.ExpiresAt == nil || !st.ExpiresAt.Equal(&metav1.Time{Time: now.Add(2 * time.Hour)}) {
		t.Fatalf("bound at %v, expires at %v; want the class's 2h cap from binding", st.BoundAt, st.ExpiresAt)
	}

	claim.Status = st
	later := metav1.NewTime(now.Add(2 * time.Hour))
	// The machine it gave back is gone: that is not a lost machine.
	st = computeClaimStatus(&claimScope{claim: claim, lost: "machine pools/mac-1 is gone"}, later)
	ready := findCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
	stalled := findCondition(st.Conditions, macvirtv1alpha1.ConditionStalled)
	switch {
	case st.Phase != macvirtv1alpha1.ClaimExpired:
		t.Errorf("phase %s, want Expired", st.Phase)
	case ready == nil || ready.Reason != macvirtv1alpha1.ReasonLifetimeExpired || !strings.Contains(ready.Message, "delete it, and claim again"):
		t.Errorf("Ready %+v, want LifetimeExpired saying what to do", ready)
	case stalled == nil || stalled.Status != metav1.ConditionTrue:
		t.Errorf("Stalled %+v, want True: only a person ends it", stalled)
	case st.Connection != nil:
		t.Errorf("connection %+v, want none", st.Connection)
	}
	// Nothing brings it back.
	claim.Status = st
	if again := computeClaimStatus(&claimScope{claim: claim, machine: machine}, later); again.Phase != macvirtv1alpha1.ClaimExpired {
		t.Errorf("phase %s with a machine in the scope, want Expired for good", again.Phase)
	}
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
