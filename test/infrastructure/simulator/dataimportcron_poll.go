/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// How a DataImportCron learns its image's digest. For a registry URL with
// the default pull method (pod), CDI creates a CronJob on the cron's
// schedule, plus one Job at once, in its own namespace; each run's pod
// (tools/cdi-source-update-poller) asks the registry for the digest and
// writes it, with the time, onto the cron, or fails and writes nothing
// (dataimportcron-controller.go, initCron, newCronJob, newInitialJob). With
// pullMethod node the controller polls itself when the time in the cron's
// nextCronTime annotation has come, through a pod running the image
// (pollSourceDigest, updateContainerImageDesiredDigest). The simulator
// keeps in memory what the CronJob and that pod hold, and asks its
// Registry instead of a registry.

// nodePullRetry is how soon CDI looks again at the pod it polls a node
// pull through (pollSourceDigest: RequeueAfter 3 s).
const nodePullRetry = 3 * time.Second

// imagePullFailure is the kubelet's failure CDI reports for a node-pull
// poller pod whose image cannot be pulled (fetchContainerImageDigest, with
// pkg/common's ImagePullFailureText).
const imagePullFailure = "failed to pull image %s: ErrImagePull"

// dataImportCrons is the simulator's side of DataImportCron polling: the
// registry, and per cron what its CronJob (or poller pod) would hold.
type dataImportCrons struct {
	mu sync.Mutex
	// registry replaces Options.Registry once set is true (SetRegistry).
	registry *Registry
	set      bool
	// events prompts the DataImportCron controller (PollDataImportCron).
	events chan event.GenericEvent
	crons  map[types.NamespacedName]*cronPoller
}

// cronPoller is what a cron's CronJob and poller pod would hold.
type cronPoller struct {
	uid types.UID
	// schedule is the CronJob's schedule, next its next run.
	schedule string
	next     time.Time
	// requested is a run not yet made: the initial Job, or a manual one.
	requested bool
	// podPending says a node-pull poller pod has been created and its
	// outcome is due at the next look.
	podPending bool
}

// SetRegistry replaces the registry DataImportCrons poll (Options.Registry);
// nil leaves the simulator without one, so that every poll fails. The
// change shows at each cron's next poll.
func (s *Simulator) SetRegistry(r *Registry) {
	s.crons.mu.Lock()
	defer s.crons.mu.Unlock()
	s.crons.registry, s.crons.set = r, true
}

// PollDataImportCron polls the DataImportCron namespace/name now instead of
// at its next scheduled time, as `kubectl create job --from=cronjob/...` on
// its CronJob (or, for pullMethod node, an earlier nextCronTime) would. A
// cron without a schedule is never polled, by this either.
func (s *Simulator) PollDataImportCron(namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	s.crons.mu.Lock()
	s.crons.poller(key, "").requested = true
	ch := s.crons.events
	s.crons.mu.Unlock()
	send(ch, &cdiv1.DataImportCron{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
}

// registryOf is the registry polls ask.
func (s *Simulator) registryOf() *Registry {
	s.crons.mu.Lock()
	defer s.crons.mu.Unlock()
	if s.crons.set {
		return s.crons.registry
	}
	return s.opts.Registry
}

// channel returns the prompts' channel, made on first use.
func (c *dataImportCrons) channel() chan event.GenericEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events = make(chan event.GenericEvent, faultEventBuffer)
	}
	return c.events
}

// poller returns the poller state of key for the cron with uid ("" matches
// any), new when there is none or it belonged to an earlier cron of that
// name. c.mu must be held.
func (c *dataImportCrons) poller(key types.NamespacedName, uid types.UID) *cronPoller {
	if c.crons == nil {
		c.crons = map[types.NamespacedName]*cronPoller{}
	}
	p := c.crons[key]
	if p == nil || (uid != "" && p.uid != "" && p.uid != uid) {
		p = &cronPoller{}
		c.crons[key] = p
	}
	if p.uid == "" {
		p.uid = uid
	}
	return p
}

// forget drops the state of a cron that is gone.
func (c *dataImportCrons) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.crons, key)
}

// due reports whether the CronJob of a pod-pull cron runs now: its first
// run (the initial Job), a requested run, or its schedule's next time has
// come. A changed schedule moves the next run, as CDI updating the CronJob
// does (cronJobExistsAndUpdated); it does not run it. next is the run after.
func (c *dataImportCrons) due(dic *cdiv1.DataImportCron, sched cron.Schedule, now time.Time) (due bool, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.poller(client.ObjectKeyFromObject(dic), dic.UID)
	if p.next.IsZero() {
		// The CronJob is created with its initial Job.
		p.requested = true
	}
	if p.schedule != dic.Spec.Schedule || p.next.IsZero() {
		p.schedule, p.next = dic.Spec.Schedule, sched.Next(now)
	}
	return p.requested || !now.Before(p.next), p.next
}

// ran records a run of the cron's poller made at now.
func (c *dataImportCrons) ran(dic *cdiv1.DataImportCron, sched cron.Schedule, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.poller(client.ObjectKeyFromObject(dic), dic.UID)
	p.requested = false
	if !now.Before(p.next) {
		p.next = sched.Next(now)
	}
	return p.next
}

// runPoller plays a run of the CronJob of a pod-pull registry cron when one
// is due: with the registry's digest for the cron's URL it sets the
// lastCronTime annotation and, if the digest is new, sourceDesiredDigest,
// and writes the cron (tools/cdi-source-update-poller, main). A URL the
// registry does not know fails the run, which writes nothing. wrote says the
// cron was written, which brings the next reconcile; wait is the time to the
// next run.
func (r *dataImportCronReconciler) runPoller(ctx context.Context, dic *cdiv1.DataImportCron) (wrote bool, wait time.Duration, err error) {
	if !isRegistryURLSource(dic) || isNodePull(dic) || dic.Spec.Schedule == "" {
		return false, 0, nil
	}
	sched, err := cron.ParseStandard(dic.Spec.Schedule)
	if err != nil {
		// The API server refuses such a CronJob.
		return false, 0, fmt.Errorf("creating the CronJob of DataImportCron %s/%s: schedule %q: %w", dic.Namespace, dic.Name, dic.Spec.Schedule, err)
	}
	now := time.Now()
	due, next := r.sim.crons.due(dic, sched, now)
	if !due {
		return false, next.Sub(now), nil
	}
	url := *dic.Spec.Template.Spec.Source.Registry.URL
	digest, ok := r.sim.registryOf().Digest(url)
	if !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("DataImportCron poll failed: image not in the registry", "url", url)
		return false, r.sim.crons.ran(dic, sched, now).Sub(now), nil
	}
	polled := dic.DeepCopy()
	setAnnotation(polled, annLastCronTime, now.Format(time.RFC3339))
	if digest != "" && digest != polled.Annotations[AnnSourceDesiredDigest] {
		setAnnotation(polled, AnnSourceDesiredDigest, digest)
	}
	if equalAnnotations(polled, dic) {
		return false, r.sim.crons.ran(dic, sched, now).Sub(now), nil
	}
	if err := r.sim.client.Update(ctx, polled); err != nil {
		// The poller pod fails and its Job tries again.
		return false, 0, fmt.Errorf("updating DataImportCron %s/%s with its digest: %w", dic.Namespace, dic.Name, err)
	}
	r.sim.crons.ran(dic, sched, now)
	return true, 0, nil
}

// pollInController plays CDI polling a node-pull cron itself
// (pollSourceDigest): once the nextCronTime annotation's time has come, a
// poller pod is created and looked at nodePullRetry later; its outcome is
// the registry's digest, set with lastCronTime as the pod-pull poller does,
// or an image pull failure, returned as CDI returns it (the cron is then
// not written). nextCronTime then moves to the schedule's next time.
func (r *dataImportCronReconciler) pollInController(dic *cdiv1.DataImportCron) (time.Duration, error) {
	sched, err := cron.ParseStandard(dic.Spec.Schedule)
	if err != nil {
		return 0, fmt.Errorf("parsing the schedule of DataImportCron %s/%s: %w", dic.Namespace, dic.Name, err)
	}
	now := time.Now()
	r.sim.crons.mu.Lock()
	p := r.sim.crons.poller(client.ObjectKeyFromObject(dic), dic.UID)
	due := p.requested
	r.sim.crons.mu.Unlock()
	// An empty annotation is set to now (initCron), so the poll is due.
	if s := dic.Annotations[annNextCronTime]; s == "" {
		setAnnotation(dic, annNextCronTime, now.Format(time.RFC3339))
		due = true
	} else if !due {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return 0, fmt.Errorf("parsing %s of DataImportCron %s/%s: %w", annNextCronTime, dic.Namespace, dic.Name, err)
		}
		due = !t.After(now)
	}
	if !due {
		return setNextCronTime(dic, sched, now), nil
	}
	r.sim.crons.mu.Lock()
	pending := p.podPending
	p.podPending = true
	r.sim.crons.mu.Unlock()
	if !pending {
		return nodePullRetry, nil
	}
	url := *dic.Spec.Template.Spec.Source.Registry.URL
	digest, ok := r.sim.registryOf().Digest(url)
	if !ok {
		return nodePullRetry, fmt.Errorf(imagePullFailure, strings.TrimPrefix(url, "docker://"))
	}
	r.sim.crons.mu.Lock()
	p.podPending, p.requested = false, false
	r.sim.crons.mu.Unlock()
	setAnnotation(dic, annLastCronTime, now.Format(time.RFC3339))
	if digest != "" && digest != dic.Annotations[AnnSourceDesiredDigest] {
		setAnnotation(dic, AnnSourceDesiredDigest, digest)
	}
	return setNextCronTime(dic, sched, now), nil
}

// setNextCronTime writes the schedule's next time after now in the
// nextCronTime annotation and returns the time to it (setNextCronTime).
func setNextCronTime(dic *cdiv1.DataImportCron, sched cron.Schedule, now time.Time) time.Duration {
	next := sched.Next(now)
	setAnnotation(dic, annNextCronTime, next.Format(time.RFC3339))
	return next.Sub(now)
}

// isRegistryURLSource reports a cron importing from a registry URL
// (isURLSource).
func isRegistryURLSource(dic *cdiv1.DataImportCron) bool {
	src := dic.Spec.Template.Spec.Source
	return src != nil && src.Registry != nil && src.Registry.URL != nil
}

// isNodePull reports a registry cron with pullMethod node (isNodePull).
func isNodePull(dic *cdiv1.DataImportCron) bool {
	src := dic.Spec.Template.Spec.Source
	return src != nil && src.Registry != nil && src.Registry.PullMethod != nil &&
		*src.Registry.PullMethod == cdiv1.RegistryPullNode
}

func setAnnotation(obj metav1.Object, key, value string) {
	anns := obj.GetAnnotations()
	if anns == nil {
		anns = map[string]string{}
	}
	anns[key] = value
	obj.SetAnnotations(anns)
}

func equalAnnotations(a, b metav1.Object) bool {
	x, y := a.GetAnnotations(), b.GetAnnotations()
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
}
