package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// maxExpiryWarning is the longest a claim is warned before its lifetime
// ends; shorter lifetimes are warned a tenth of it before.
const maxExpiryWarning = 15 * time.Minute

// lifetimeOf is how long a claim keeps its machine: its spec.lifetime,
// capped by the class's maxClaimLifetime, or that cap when the claim names
// none; zero when neither is set.
func lifetimeOf(claim *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass) time.Duration {
	var asked, limit time.Duration
	if claim.Spec.Lifetime != nil {
		asked = claim.Spec.Lifetime.Duration
	}
	if class != nil && class.Spec.Tenancy.MaxClaimLifetime != nil {
		limit = class.Spec.Tenancy.MaxClaimLifetime.Duration
	}
	switch {
	case asked <= 0:
		return max(limit, 0)
	case limit > 0 && limit < asked:
		return limit
	}
	return asked
}

// expiresAt is when a claim bound at boundAt for lifetime must give its
// machine back; nil for a claim without one.
func expiresAt(boundAt metav1.Time, lifetime time.Duration) *metav1.Time {
	if lifetime <= 0 {
		return nil
	}
	t := metav1.NewTime(boundAt.Add(lifetime))
	return &t
}

// expiryWarningAt is when the claim's tenant is warned that its lifetime
// ends at expires: a tenth of the lifetime before, 15 minutes at most.
func expiryWarningAt(boundAt, expires time.Time) time.Time {
	return expires.Add(-min(expires.Sub(boundAt)/10, maxExpiryWarning))
}

// expired says the claim's lifetime is over at now.
func expired(st *macvirtv1alpha1.MacClaimStatus, now time.Time) bool {
	return st.Phase == macvirtv1alpha1.ClaimExpired || st.ExpiresAt != nil && !now.Before(st.ExpiresAt.Time)
}

// lifetimeNext is how long until the claim next needs a look for its
// lifetime (its warning, then its end); zero when it needs none.
func lifetimeNext(st *macvirtv1alpha1.MacClaimStatus, now time.Time) time.Duration {
	if st.ExpiresAt == nil || st.BoundAt == nil || st.Phase == macvirtv1alpha1.ClaimExpired {
		return 0
	}
	for _, at := range []time.Time{expiryWarningAt(st.BoundAt.Time, st.ExpiresAt.Time), st.ExpiresAt.Time} {
		if now.Before(at) {
			return at.Sub(now)
		}
	}
	// Over, and not yet said: look now.
	return time.Nanosecond
}

// expiryWarning is the ClaimExpiring event's note, when now is within the
// warning before the claim's lifetime ends; ok is false otherwise.
func expiryWarning(c *macvirtv1alpha1.MacClaim, now time.Time) (string, bool) {
	st := &c.Status
	if st.ExpiresAt == nil || st.BoundAt == nil || st.Phase == macvirtv1alpha1.ClaimExpired ||
		now.Before(expiryWarningAt(st.BoundAt.Time, st.ExpiresAt.Time)) || !now.Before(st.ExpiresAt.Time) {
		return "", false
	}
	return fmt.Sprintf("the claim's lifetime ends at %s (in %s): its machine is then given back (reclaimPolicy %s); save what you need from it",
		st.ExpiresAt.UTC().Format(time.RFC3339), st.ExpiresAt.Sub(now).Round(time.Second), reclaimPolicy(c)), true
}

// checkNotExpired ends the steps of a claim whose lifetime is over; it only
// reads the clock. Such a claim binds nothing, exposes nothing and writes
// no Secret any more; its status says Expired, and the machine side gives
// the machine back.
func (r *Reconciler) checkNotExpired(_ context.Context, s *claimScope) (bool, error) {
	return !expired(&s.claim.Status, r.Clock.Now()), nil
}

// watchLifetime warns the claim's tenant once (per process) before its
// lifetime ends, and returns when to look at the claim again: requeue, or
// sooner for its warning or its end.
func (r *Reconciler) watchLifetime(c *macvirtv1alpha1.MacClaim, requeue time.Duration) time.Duration {
	now := r.Clock.Now()
	if c.Status.Phase == macvirtv1alpha1.ClaimExpired {
		r.expiryWarned.Forget(c.UID)
	}
	if note, ok := expiryWarning(c, now); ok {
		if end, _, warned := r.expiryWarned.Get(c.UID, now); !warned || !end.Equal(c.Status.ExpiresAt.Time) {
			r.expiryWarned.Assume(c.UID, c.Status.ExpiresAt.Time, now, base.UntilForgotten)
			base.RecordEvent(r.Recorder, c, corev1.EventTypeWarning, "ClaimExpiring", "Lifetime", note)
		}
	}
	if next := lifetimeNext(&c.Status, now); next > 0 && (requeue == 0 || next < requeue) {
		return next
	}
	return requeue
}
