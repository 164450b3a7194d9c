package hostagent

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		due := dueRefreshes(classes.Items, last, a.clock.Now())
		if len(due) == 0 {
			continue
		}
		// Only the images the Mac caches: another Mac's next machine
		// pulls the tag as it is then.
		cached, err := a.driver.Images(ctx)
		if err != nil {
			continue
		}
		for _, image := range due {
			if !cachedImage(cached, image) {
				continue
			}
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
			a.recordRefresh(image, err)
		}
	}
}

// recordRefresh keeps how the last refresh of image went, for the
// MacHost's ImageRefreshFailed condition.
func (a *Agent) recordRefresh(image string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		delete(a.refreshFailures, image)
		return
	}
	a.refreshFailures[image] = err
}

// refreshCondition is ImageRefreshFailed from the last refresh of each
// image: the tool's words of the failures, by image.
func refreshCondition(failures map[string]error) (metav1.ConditionStatus, string, string) {
	if len(failures) == 0 {
		return metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected, "no refresh of a class image failed the last time"
	}
	images := slices.Sorted(maps.Keys(failures))
	reason, msgs := "PullFailed", make([]string, 0, len(images))
	for _, image := range images {
		err := failures[image]
		if errors.Is(err, errors.ErrUnsupported) {
			reason = "Unsupported"
		}
		msgs = append(msgs, image+": "+err.Error())
	}
	return metav1.ConditionTrue, reason, "refreshing class images (image.refresh) failed, and the Mac's idle machines keep the digest they have: " +
		strings.Join(msgs, "; ")
}

// dueRefreshes are the images to pull again now: those of Virtualization
// classes with image.refresh whose schedule came due since last (by
// class). last is updated; a class seen the first time starts its
// schedule now, as a Mac that just started has nothing stale.
func dueRefreshes(classes []macvirtv1alpha1.MacClass, last map[string]time.Time, now time.Time) []string {
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
		if image := c.Spec.VMImage(); !slices.Contains(due, image) {
			due = append(due, image)
		}
	}
	return due
}
