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
	// leaseDuration is how long after another process last saw a Lease
	// renewed (by its own clock: the two hosts' clocks may differ) it
	// still takes the Lease's process for running; six renewals, so a
	// short trouble with the API server does not end it.
	leaseDuration = time.Minute
)

// leaseName is the Lease of process id in group name.
func leaseName(name, id string) string {
	return "fleeting-" + name + "-" + id
}

// renewLease creates or renews this process's Lease. It reports false,
// with no error, when the plugin's identity may not: then the process
// works without one.
func (g *InstanceGroup) renewLease(ctx context.Context, now time.Time) (bool, error) {
	seconds := int32(leaseDuration / time.Second)
	holder := g.self.id
	at := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{}
	err := g.client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: leaseName(g.Name, g.self.id)}, l)
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: leaseName(g.Name, g.self.id),
			Labels: map[string]string{LabelGroup: g.Name}, Annotations: map[string]string{AnnotationProcess: g.self.id}},
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
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: leaseName(g.Name, g.self.id)}}
			_ = client.IgnoreNotFound(g.client.Delete(dctx, l))
			return
		case now := <-t.C:
			if _, err := g.renewLease(ctx, now); err != nil && ctx.Err() == nil {
				g.log.Warn("renewing the plugin process's Lease", "err", err)
			}
		}
	}
}

// running are the group's processes whose Lease this process saw renewed
// within leaseDuration, by its own clock (seen remembers each Lease's last
// renewal and when it was first seen), this one's included.
func (g *InstanceGroup) running(ctx context.Context, now time.Time) (map[string]bool, error) {
	if !g.leases {
		return nil, nil
	}
	list := &coordinationv1.LeaseList{}
	if err := g.client.List(ctx, list, client.InNamespace(g.Namespace), client.MatchingLabels{LabelGroup: g.Name}); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]bool{g.self.id: true}
	listed := map[string]bool{}
	for _, l := range list.Items {
		id := l.Annotations[AnnotationProcess]
		if id == "" || l.Spec.RenewTime == nil {
			continue
		}
		listed[id] = true
		renew := l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		if s, ok := g.seen[id]; !ok || s.renew != renew {
			g.seen[id] = sighting{renew: renew, at: now}
		}
		if now.Sub(g.seen[id].at) < leaseDuration {
			out[id] = true
		}
	}
	for id := range g.seen {
		if !listed[id] {
			delete(g.seen, id)
		}
	}
	return out, nil
}

// sighting is a Lease's renewal as a process last saw it change, and when.
type sighting struct {
	renew string
	at    time.Time
}
