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

package host

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// hostStatus is the operator's part of a host's status, and when to look
// again (the lease's end, which no watch reports).
type hostStatus struct {
	Status       macvirtv1alpha1.MacHostStatus
	RequeueAfter time.Duration
}

// computeHostStatus decides Ready and Schedulable from the agent's report
// and the machines placed on the host. Messages name fixed times, never
// ages, so an unchanged host is not written again.
func computeHostStatus(s *scope) hostStatus {
	h := s.Host
	st := h.Status.DeepCopy()
	st.ObservedGeneration = h.Generation
	st.Machines, st.SuspendedMachines = base.Int32(s.Placed), base.Int32(s.Suspended)
	ready, requeue := readiness(s)
	schedulable := schedulability(s, ready)
	set := func(t string, c base.Condition) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: c.Status, Reason: c.Reason,
			Message: c.Message, ObservedGeneration: h.Generation, LastTransitionTime: metav1.NewTime(s.Now)})
	}
	set(macvirtv1alpha1.ConditionReady, ready)
	set(macvirtv1alpha1.HostConditionSchedulable, schedulable)
	return hostStatus{Status: *st, RequeueAfter: requeue}
}

// readiness is the Ready condition: the lease is current, the tool answers
// and the VM count is not stuck.
func readiness(s *scope) (base.Condition, time.Duration) {
	a := s.Host.Status.Agent
	if a == nil || a.LastHeartbeat == nil {
		return base.CondFalse(macvirtv1alpha1.ReasonHostNotRegistered,
			"no host agent has reported; install it on the Mac (docs/apple-silicon-hosts.md)"), 0
	}
	end := s.BeatSeenAt.Add(a.Lease())
	if !s.Now.Before(end) {
		return base.Condition{Status: metav1.ConditionUnknown, Problem: base.Problem{Reason: macvirtv1alpha1.ReasonHostLost,
			Message: fmt.Sprintf("no heartbeat from the host agent since %s (stamped %s by the Mac), and its lease of %s ended at %s",
				s.BeatSeenAt.UTC().Format(time.RFC3339), a.LastHeartbeat.UTC().Format(time.RFC3339), a.Lease(), end.UTC().Format(time.RFC3339))}}, 0
	}
	requeue := end.Sub(s.Now)
	if c := meta.FindStatusCondition(a.Conditions, macvirtv1alpha1.HostConditionToolReachable); c != nil && c.Status == metav1.ConditionFalse {
		return base.CondFalse(c.Reason, "the host agent cannot reach %s: %s", toolName(a), c.Message), requeue
	}
	if c := meta.FindStatusCondition(a.Conditions, macvirtv1alpha1.HostConditionVMLimitStuck); c != nil && c.Status == metav1.ConditionTrue {
		return base.CondFalse(macvirtv1alpha1.HostConditionVMLimitStuck,
			"reboot the Mac: the Virtualization framework refuses to start a VM with its VM-limit error while none runs, a count only a reboot clears; no machine is placed here until then (%s)",
			c.Message), requeue
	}
	return base.CondTrue(fmt.Sprintf("the host agent (%s) heartbeats within its lease of %s", toolName(a), a.Lease())), requeue
}

// schedulability is the Schedulable condition: Ready, not cordoned, no
// disk pressure, the tool's user logged in (the framework starts no
// recent macOS guest otherwise), and a slot without a machine.
func schedulability(s *scope, ready base.Condition) base.Condition {
	h := s.Host
	a := h.Status.Agent
	switch {
	case ready.Status != metav1.ConditionTrue:
		return base.CondFalse(ready.Reason, "not Ready: %s", ready.Message)
	case h.Spec.Unschedulable:
		return base.CondFalse(macvirtv1alpha1.ReasonHostCordoned, "spec.unschedulable is set; machines already here keep running")
	}
	for _, t := range []string{macvirtv1alpha1.HostConditionDiskPressure, macvirtv1alpha1.HostConditionNoLoginSession} {
		if c := meta.FindStatusCondition(a.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return base.CondFalse(t, "%s", c.Message)
		}
	}
	held, note := s.Placed-s.Suspended, ""
	if s.Suspended > 0 {
		note = fmt.Sprintf(" (%d suspended machines hold none)", s.Suspended)
	}
	if held >= int(a.Slots) {
		return base.CondFalse(macvirtv1alpha1.ReasonHostFull, "%d of %d slots hold machines%s", held, a.Slots, note)
	}
	return base.CondTrue(fmt.Sprintf("%d of %d slots hold machines%s", held, a.Slots, note))
}

func toolName(a *macvirtv1alpha1.HostAgentReport) string {
	if a.Tool == "" {
		return "its tool"
	}
	return a.Tool
}
