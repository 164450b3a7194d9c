package hostagent

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// A Virtualization class's image.refresh: on its schedule, the agent pulls
// the class's image again when its Mac caches it, so a re-pushed tag is on
// the Mac before any machine needs it. Machines report the digest the
// cache now holds beside the one their VM was made from
// (status.host.latestImageDigest), and pools replace the idle ones made
// from an older digest. A Mac that has not cached the image pulls nothing:
// its next machine of the class pulls the tag as it is then.

// refreshTick is how often the agent looks for a schedule that is due.
const refreshTick = 15 * time.Second

// refreshImages pulls the class images whose refresh is due, until ctx
// ends, one at a time, each with one of the agent's pull tokens.
func (a *Agent) refreshImages(ctx context.Context) error {
	log := ctrl.Log.WithName("image-refresh").WithValues("host", a.opts.Host)
	last := map[string]time.Time{}
	t := time.NewTicker(refreshTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		classes := &macvirtv1alpha1.MacClassList{}
		if err := a.client.List(ctx, classes); err != nil {
			continue
		}
		cached, err := a.driver.Images(ctx)
		if err != nil {
			continue
		}
		for _, image := range dueRefreshes(classes.Items, cached, last, a.clock.Now()) {
			select {
			case a.creations.pulls <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			began := time.Now()
			err := a.driver.Pull(ctx, image)
			<-a.creations.pulls
			switch {
			case errors.Is(err, errors.ErrUnsupported):
				log.V(1).Info("the tool cannot refresh an image", "image", image, "error", err.Error())
			case err != nil:
				log.Info("refreshing a class image failed; the next schedule tries again", "image", image, "error", err.Error())
			default:
				log.Info("refreshed a class image", "image", image, "took", time.Since(began).Round(time.Millisecond).String())
			}
		}
	}
}

// dueRefreshes are the images to pull again now: those of Virtualization
// classes with image.refresh whose schedule came due since last (by class)
// and which the Mac caches. last is updated; a class seen the first time
// starts its schedule now, as a Mac that just started has nothing stale.
func dueRefreshes(classes []macvirtv1alpha1.MacClass, cached []string, last map[string]time.Time, now time.Time) []string {
	var due []string
	for i := range classes {
		c := &classes[i]
		if !c.Spec.OnHosts() || c.Spec.Image.Refresh == nil {
			delete(last, c.Name)
			continue
		}
		sched, err := cron.ParseStandard(c.Spec.Image.Refresh.Schedule)
		if err != nil {
			continue
		}
		since, seen := last[c.Name]
		if !seen {
			last[c.Name] = now
			continue
		}
		if now.Before(sched.Next(since)) {
			continue
		}
		last[c.Name] = now
		if image := c.Spec.VMImage(); cachedImage(cached, image) && !slices.Contains(due, image) {
			due = append(due, image)
		}
	}
	return due
}
