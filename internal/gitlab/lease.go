package gitlab

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A plugin process says it runs with a Lease it renews: a process that
// starts while an earlier one of its name still drains its jobs (a rolling
// update of the runner) leaves that one's Macs to it, and releases them
// only once its Lease has lapsed (it stopped, or died).
const (
	// leaseRenew is how often a process renews its Lease.
	leaseRenew = 10 * time.Second
	// leaseDuration is how long a Lease not renewed still says its
	// process runs.
	leaseDuration = 30 * time.Second
)

// leaseName is the Lease of the process with key id keyID in group name.
func leaseName(name, keyID string) string {
	return "fleeting-" + name + "-" + shortID(keyID)
}

// shortID is a key id fit for an object's name: lower-case hex or the
// fingerprint's first characters, at most 16.
func shortID(keyID string) string {
	out := make([]byte, 0, 16)
	for i := 0; i < len(keyID) && len(out) < 16; i++ {
		switch c := keyID[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		}
	}
	return string(out)
}

// renewLease creates or renews this process's Lease. It reports false,
// with no error, when the plugin's identity may not: then the process
// works without one.
func (g *InstanceGroup) renewLease(ctx context.Context, now time.Time) (bool, error) {
	seconds := int32(leaseDuration / time.Second)
	holder := g.keys.id
	at := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{}
	err := g.client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: leaseName(g.Name, g.keys.id)}, l)
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: leaseName(g.Name, g.keys.id),
			Labels: map[string]string{LabelGroup: g.Name}, Annotations: map[string]string{AnnotationKey: g.keys.id}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &at, RenewTime: &at}}
		err = g.client.Create(ctx, l)
	case err == nil:
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &seconds, &at
		err = g.client.Update(ctx, l)
	}
	if apierrors.IsForbidden(err) {
		return false, nil
	}
	return err == nil, err
}

// keepLease renews the Lease until ctx ends, then deletes it, so the next
// process releases what this one leaves at once.
func (g *InstanceGroup) keepLease(ctx context.Context) {
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: leaseName(g.Name, g.keys.id)}}
			_ = client.IgnoreNotFound(g.client.Delete(dctx, l))
			return
		case now := <-t.C:
			if _, err := g.renewLease(ctx, now); err != nil && ctx.Err() == nil {
				g.log.Warn("renewing the plugin process's Lease", "err", err)
			}
		}
	}
}

// running are the key ids of the group's processes whose Lease says they
// run at now (this one's included).
func (g *InstanceGroup) running(ctx context.Context, now time.Time) (map[string]bool, error) {
	if !g.leases {
		return nil, nil
	}
	list := &coordinationv1.LeaseList{}
	if err := g.client.List(ctx, list, client.InNamespace(g.Namespace), client.MatchingLabels{LabelGroup: g.Name}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range list.Items {
		if leaseLive(&l, now) {
			out[l.Annotations[AnnotationKey]] = true
		}
	}
	return out, nil
}

// leaseLive: the Lease was renewed within its duration before now.
func leaseLive(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}
