package harness

import (
	"context"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// ClaimWatch follows a CI integration's claims in one namespace (a runner
// set's, a Buildkite queue's, a GitLab group's, chosen by labels) and the
// machines bound to them, from watches, so that nothing between two polls
// is missed: the most claims at once, the most at once that were not being
// released (runners that may take a job, which maxRunners or maxAgents
// bounds), and, by machine UID (pools reuse names), every claim each
// machine served.
type ClaimWatch struct {
	mu                 sync.Mutex
	live, active       map[string]bool
	peak, peakActive   int
	claims             map[string]bool
	served             map[types.UID]map[string]bool
	claimsW, machinesW watch.Interface
	done               sync.WaitGroup
}

// ClaimPeaks is what a ClaimWatch saw.
type ClaimPeaks struct {
	// All is the most claims that existed at once, those being released
	// included; Active the most not being released.
	All, Active int
	// Claims names every claim seen; Served has, by machine UID, the
	// claims each machine served.
	Claims []string
	Served map[types.UID][]string
}

// Reused lists the machines that served more than one claim.
func (p ClaimPeaks) Reused() map[types.UID][]string {
	out := map[types.UID][]string{}
	for uid, claims := range p.Served {
		if len(claims) > 1 {
			out[uid] = claims
		}
	}
	return out
}

// WatchClaims starts following the claims in ns that carry labels, until
// Stop.
func WatchClaims(ctx context.Context, c client.WithWatch, ns string, labels map[string]string) (*ClaimWatch, error) {
	cw, err := c.Watch(ctx, &macvirtv1alpha1.MacClaimList{}, client.InNamespace(ns), client.MatchingLabels(labels))
	if err != nil {
		return nil, err
	}
	mw, err := c.Watch(ctx, &macvirtv1alpha1.MacMachineList{})
	if err != nil {
		cw.Stop()
		return nil, err
	}
	w := &ClaimWatch{live: map[string]bool{}, active: map[string]bool{}, claims: map[string]bool{},
		served: map[types.UID]map[string]bool{}, claimsW: cw, machinesW: mw}
	w.done.Go(func() {
		for ev := range cw.ResultChan() {
			if c, ok := ev.Object.(*macvirtv1alpha1.MacClaim); ok {
				w.claim(ev.Type, c)
			}
		}
	})
	w.done.Go(func() {
		for ev := range mw.ResultChan() {
			if m, ok := ev.Object.(*macvirtv1alpha1.MacMachine); ok && m.Spec.ClaimRef != nil && m.Spec.ClaimRef.Namespace == ns {
				w.machine(m.UID, m.Spec.ClaimRef.Name)
			}
		}
	})
	return w, nil
}

func (w *ClaimWatch) claim(t watch.EventType, c *macvirtv1alpha1.MacClaim) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch t {
	case watch.Added, watch.Modified:
		w.live[c.Name], w.claims[c.Name] = true, true
		if c.DeletionTimestamp.IsZero() {
			w.active[c.Name] = true
		} else {
			delete(w.active, c.Name)
		}
	case watch.Deleted:
		delete(w.live, c.Name)
		delete(w.active, c.Name)
	}
	w.peak, w.peakActive = max(w.peak, len(w.live)), max(w.peakActive, len(w.active))
}

func (w *ClaimWatch) machine(uid types.UID, claim string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.served[uid] == nil {
		w.served[uid] = map[string]bool{}
	}
	w.served[uid][claim] = true
}

// Peaks is what the watch saw so far.
func (w *ClaimWatch) Peaks() ClaimPeaks {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := ClaimPeaks{All: w.peak, Active: w.peakActive, Served: map[types.UID][]string{}}
	for name := range w.claims {
		p.Claims = append(p.Claims, name)
	}
	sort.Strings(p.Claims)
	for uid, claims := range w.served {
		for name := range claims {
			p.Served[uid] = append(p.Served[uid], name)
		}
		sort.Strings(p.Served[uid])
	}
	return p
}

// Stop ends the watches.
func (w *ClaimWatch) Stop() {
	w.claimsW.Stop()
	w.machinesW.Stop()
	w.done.Wait()
}
