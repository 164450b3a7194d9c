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

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// keepHost registers the MacHost and heartbeats into its status.agent
// four times per lease until ctx ends; each beat also removes orphaned
// VMs, gracefully.
func (a *Agent) keepHost(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithValues("host", a.opts.Host)
	// Orphans are judged from the machines placed here: never from a
	// cache that does not hold them all yet.
	if !a.mgr.GetCache().WaitForCacheSync(ctx) {
		return nil
	}
	stopAsked := map[string]time.Time{}
	tick := time.NewTicker(a.opts.Lease / 4)
	defer tick.Stop()
	for {
		if err := a.beat(ctx); err != nil {
			log.Error(err, "heartbeat failed")
		}
		if err := a.removeOrphans(ctx, stopAsked); err != nil {
			log.Error(err, "removing orphaned VMs failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// beat registers the host when it is missing and writes its report.
func (a *Agent) beat(ctx context.Context) error {
	h := &macvirtv1alpha1.MacHost{}
	err := a.reader.Get(ctx, client.ObjectKey{Name: a.opts.Host}, h)
	if apierrors.IsNotFound(err) {
		h = &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: a.opts.Host}}
		if err := a.client.Create(ctx, h); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering MacHost %s: %w", a.opts.Host, err)
		}
		err = a.reader.Get(ctx, client.ObjectKey{Name: a.opts.Host}, h)
	}
	if err != nil {
		return fmt.Errorf("reading MacHost %s: %w", a.opts.Host, err)
	}
	before := h.DeepCopy()
	h.Status.Agent = a.report(ctx, h.Status.Agent)
	if err := a.client.Status().Patch(ctx, h, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("reporting MacHost %s: %w", a.opts.Host, err)
	}
	return nil
}

// What a heartbeat reads of the Mac is read again only this often: the
// facts run a handful of commands (sysctl, defaults, stat) and the tool's
// version one more, every beat otherwise. Free disk is a minute old at
// most; a tool upgraded shows within ten.
const (
	factsTTL       = time.Minute
	toolVersionTTL = 10 * time.Minute
)

// cached keeps a value read at some time; an error is never kept.
type cached[T any] struct {
	mu sync.Mutex
	at time.Time
	v  T
	ok bool
}

// get is the value kept, when it was read less than ttl before now, else
// read anew.
func (c *cached[T]) get(now time.Time, ttl time.Duration, read func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && now.Sub(c.at) < ttl && !now.Before(c.at) {
		return c.v, nil
	}
	v, err := read()
	if err != nil {
		return v, err
	}
	c.v, c.at, c.ok = v, now, true
	return v, nil
}

// report is the host's report now; conditions keep their transition
// times while they hold.
func (a *Agent) report(ctx context.Context, was *macvirtv1alpha1.HostAgentReport) *macvirtv1alpha1.HostAgentReport {
	now := metav1.NewTime(a.clock.Now())
	lease := clamp32(int64(a.opts.Lease / time.Second))
	r := &macvirtv1alpha1.HostAgentReport{AgentVersion: a.opts.Version, Tool: a.driver.Name(), LastHeartbeat: &now, LeaseSeconds: &lease}
	if was != nil {
		r.Conditions = was.Conditions
	}
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&r.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
	}
	var facts Facts
	if a.opts.Facts != nil {
		facts, _ = a.facts.get(a.clock.Now(), factsTTL, func() (Facts, error) { return a.opts.Facts(ctx), nil })
		r.Chip, r.MacOSVersion, r.FreeDisk = facts.Chip, facts.MacOSVersion, facts.FreeDisk
	}
	slots, err := a.driver.Slots(ctx)
	if err != nil {
		set(macvirtv1alpha1.HostConditionToolReachable, metav1.ConditionFalse, "ToolFailed", truncate(err.Error()))
	} else {
		set(macvirtv1alpha1.HostConditionToolReachable, metav1.ConditionTrue, macvirtv1alpha1.ReasonAsExpected, a.driver.Name()+" answers")
		r.Slots, r.RunningVMs = clamp32(int64(slots.Max)), clamp32(int64(slots.Running))
	}
	if vms, err := a.driver.List(ctx); err == nil {
		n := 0
		for _, vm := range vms {
			if vm.State == vz.StateSuspended {
				n++
			}
		}
		r.SuspendedVMs = clamp32(int64(n))
	}
	if p := a.hostSuspendProblem(ctx); len(p) > 256 {
		r.SuspendUnsupported = p[:256]
	} else {
		r.SuspendUnsupported = p
	}
	if images, err := a.driver.Images(ctx); err == nil {
		slices.Sort(images)
		if len(images) > 64 {
			images = images[:64]
		}
		r.CachedImages = images
	}
	if stuck := a.stuckCount(); stuck != "" {
		set(macvirtv1alpha1.HostConditionVMLimitStuck, metav1.ConditionTrue, macvirtv1alpha1.HostConditionVMLimitStuck, truncate(stuck))
	} else {
		set(macvirtv1alpha1.HostConditionVMLimitStuck, metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected, "the last start was not refused with no VM running")
	}
	problem := func(t string, f Finding) {
		status, reason, msg := problemCondition(t, f)
		set(t, status, reason, truncate(msg))
	}
	if r.FreeDisk != nil {
		problem(macvirtv1alpha1.HostConditionDiskPressure, CheckFreeDisk(r.FreeDisk, *a.opts.MinFreeDisk))
	} else {
		set(macvirtv1alpha1.HostConditionDiskPressure, metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected, "the free disk is not read")
	}
	problem(macvirtv1alpha1.HostConditionDHCPLeaseTooLong, CheckDHCPLease(facts.DHCPLease, facts.DHCPLeaseSource))
	if facts.ConsoleUser != "" {
		problem(macvirtv1alpha1.HostConditionNoLoginSession, CheckLoginSession(facts.User, facts.ConsoleUser, facts.AutoLoginUser))
	}
	a.mu.Lock()
	status, reason, msg := refreshCondition(a.refreshFailures)
	a.mu.Unlock()
	set(macvirtv1alpha1.HostConditionImageRefreshFailed, status, reason, truncate(msg))
	if v, err := a.toolVersion.get(a.clock.Now(), toolVersionTTL, func() (string, error) { return a.driver.Version(ctx) }); err == nil {
		problem(macvirtv1alpha1.HostConditionToolOutdated, CheckToolVersion(a.driver.Name(), v))
	}
	return r
}

// removeOrphans stops the agent's VMs that no machine names any more
// (asking macOS, never forcing) and deletes them once stopped.
func (a *Agent) removeOrphans(ctx context.Context, stopAsked map[string]time.Time) error {
	names, err := a.orphans(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		vm, err := a.driver.Get(ctx, name)
		if errors.Is(err, vz.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		in := Input{Now: a.clock.Now(), Deleting: true, Exists: true, State: vm.State, Grace: macvirtv1alpha1.DefaultShutdownGracePeriod}
		if t, ok := stopAsked[name]; ok {
			in.StopRequestedAt = &t
		}
		switch Decide(in).Action {
		case ActRequestStop:
			if err := a.requestStop(ctx, name); err != nil && !errors.Is(err, vz.ErrNotRunning) {
				errs = append(errs, fmt.Errorf("asking orphaned VM %s to shut down: %w", name, err))
				continue
			}
			stopAsked[name] = a.clock.Now()
		case ActDelete:
			if err := a.driver.Delete(ctx, name); err != nil {
				errs = append(errs, fmt.Errorf("deleting orphaned VM %s: %w", name, err))
				continue
			}
			delete(stopAsked, name)
			a.forgetMade(name)
			_ = a.markSuspendable(name, false)
			ctrl.LoggerFrom(ctx).Info("removed a VM it made whose machine no longer exists", "vm", name)
		}
	}
	return errors.Join(errs...)
}

// clamp32 is n as an int32 within the API's bounds (a count or seconds).
func clamp32(n int64) int32 {
	return int32(max(0, min(n, math.MaxInt32)))
}

func truncate(s string) string {
	if len(s) > 1024 {
		return s[:1024]
	}
	return s
}

// maxDHCPLease is the longest lease a Mac that makes and deletes VMs all
// day keeps addresses free with (Orchard warns past the same hour).
const maxDHCPLease = time.Hour

// problemCondition turns a finding into a condition that is True when the
// problem holds (a warning or failure), False when the check passed, and
// Unknown when it could not be read; the message carries the fix.
func problemCondition(conditionType string, f Finding) (metav1.ConditionStatus, string, string) {
	msg := f.Message
	if f.Fix != "" {
		msg += ". Fix: " + f.Fix
	}
	switch f.Verdict {
	case VerdictOK:
		return metav1.ConditionFalse, macvirtv1alpha1.ReasonAsExpected, msg
	case VerdictWarning, VerdictFailed:
		return metav1.ConditionTrue, conditionType, msg
	}
	return metav1.ConditionUnknown, "NotRead", msg
}
