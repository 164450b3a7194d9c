package harness

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// A claim being released counts among all claims until it is gone, and no
// longer among those that may take a job.
func TestClaimWatchCountsReleasingClaimsApart(t *testing.T) {
	w := &ClaimWatch{live: map[string]bool{}, active: map[string]bool{}, claims: map[string]bool{}, served: map[types.UID]map[string]bool{}}
	claim := func(name string, deleting bool) *macvirtv1alpha1.MacClaim {
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if deleting {
			now := metav1.Now()
			c.DeletionTimestamp = &now
		}
		return c
	}
	w.claim(watch.Added, claim("a", false))
	w.claim(watch.Added, claim("b", false))
	w.claim(watch.Modified, claim("a", true))
	w.claim(watch.Added, claim("c", false))
	w.machine("m1", "a")
	w.machine("m2", "b")
	w.machine("m2", "c")
	w.claim(watch.Deleted, claim("a", true))
	w.claim(watch.Modified, claim("b", true))
	w.claim(watch.Added, claim("d", false))
	p := w.Peaks()
	if p.All != 3 || p.Active != 2 {
		t.Errorf("peaks: all %d, active %d; want 3 and 2", p.All, p.Active)
	}
	if got := len(p.Claims); got != 4 {
		t.Errorf("claims seen: %v; want a, b, c and d", p.Claims)
	}
	if r := p.Reused(); len(r) != 1 || len(r["m2"]) != 2 {
		t.Errorf("reused: %v; want m2 serving b and c", r)
	}
}
