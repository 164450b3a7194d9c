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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestComputeHostStatus(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	beat := func(ago time.Duration, conds ...metav1.Condition) *macvirtv1alpha1.HostAgentReport {
		t := metav1.NewTime(now.Add(-ago))
		return &macvirtv1alpha1.HostAgentReport{Tool: "tart", Slots: 2, LastHeartbeat: &t, Conditions: conds}
	}
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: "R", Message: "the agent's words"}
	}
	for name, tc := range map[string]struct {
		agent         *macvirtv1alpha1.HostAgentReport
		cordoned      bool
		placed        int
		ready         metav1.ConditionStatus
		readyReason   string
		schedReason   string
		wantInMessage string
		requeue       time.Duration
		// seenAgo is how long ago the operator saw the heartbeat; unset,
		// when the Mac stamped it.
		seenAgo *time.Duration
	}{
		"never reported": {ready: metav1.ConditionFalse, readyReason: macvirtv1alpha1.ReasonHostNotRegistered,
			schedReason: macvirtv1alpha1.ReasonHostNotRegistered, wantInMessage: "install it"},
		"heartbeating, room": {agent: beat(10 * time.Second), placed: 1, ready: metav1.ConditionTrue,
			readyReason: macvirtv1alpha1.ReasonAsExpected, schedReason: macvirtv1alpha1.ReasonAsExpected, requeue: 50 * time.Second},
		"heartbeating, full": {agent: beat(0), placed: 2, ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected,
			schedReason: macvirtv1alpha1.ReasonHostFull, requeue: time.Minute},
		"lease ended": {agent: beat(time.Minute), ready: metav1.ConditionUnknown, readyReason: macvirtv1alpha1.ReasonHostLost,
			schedReason: macvirtv1alpha1.ReasonHostLost, wantInMessage: "lease of 1m0s ended"},
		"a Mac whose clock is 5m behind, heard just now, is alive": {agent: beat(5 * time.Minute), seenAgo: ptr.To(time.Duration(0)),
			ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected, schedReason: macvirtv1alpha1.ReasonAsExpected, requeue: time.Minute},
		"a Mac whose clock is 5m ahead, silent for a lease, is lost": {agent: beat(-5 * time.Minute), seenAgo: ptr.To(time.Minute),
			ready: metav1.ConditionUnknown, readyReason: macvirtv1alpha1.ReasonHostLost, schedReason: macvirtv1alpha1.ReasonHostLost, wantInMessage: "ended"},
		"cordoned": {agent: beat(0), cordoned: true, ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected,
			schedReason: macvirtv1alpha1.ReasonHostCordoned, requeue: time.Minute},
		"the tool does not answer": {agent: beat(0, cond(macvirtv1alpha1.HostConditionToolReachable, metav1.ConditionFalse)),
			ready: metav1.ConditionFalse, readyReason: "R", schedReason: "R", wantInMessage: "cannot reach tart", requeue: time.Minute},
		"the stuck count": {agent: beat(0, cond(macvirtv1alpha1.HostConditionVMLimitStuck, metav1.ConditionTrue)),
			ready: metav1.ConditionFalse, readyReason: macvirtv1alpha1.HostConditionVMLimitStuck,
			schedReason: macvirtv1alpha1.HostConditionVMLimitStuck, wantInMessage: "reboot the Mac", requeue: time.Minute},
		"disk pressure": {agent: beat(0, cond(macvirtv1alpha1.HostConditionDiskPressure, metav1.ConditionTrue)),
			ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected,
			schedReason: macvirtv1alpha1.HostConditionDiskPressure, requeue: time.Minute},
		"no login session": {agent: beat(0, cond(macvirtv1alpha1.HostConditionNoLoginSession, metav1.ConditionTrue)),
			ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected,
			schedReason: macvirtv1alpha1.HostConditionNoLoginSession, requeue: time.Minute},
		"a warning only: an old tool": {agent: beat(0, cond(macvirtv1alpha1.HostConditionToolOutdated, metav1.ConditionTrue)),
			ready: metav1.ConditionTrue, readyReason: macvirtv1alpha1.ReasonAsExpected,
			schedReason: macvirtv1alpha1.ReasonAsExpected, requeue: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			h := &macvirtv1alpha1.MacHost{Spec: macvirtv1alpha1.MacHostSpec{Unschedulable: tc.cordoned},
				Status: macvirtv1alpha1.MacHostStatus{Agent: tc.agent}}
			seen := now
			if tc.agent != nil {
				seen = tc.agent.LastHeartbeat.Time
			}
			if tc.seenAgo != nil {
				seen = now.Add(-*tc.seenAgo)
			}
			got := computeHostStatus(&scope{Now: now, Host: h, Placed: tc.placed, BeatSeenAt: seen})
			ready := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionReady)
			sched := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.HostConditionSchedulable)
			if ready.Status != tc.ready || ready.Reason != tc.readyReason {
				t.Errorf("Ready %s/%s (%s); want %s/%s", ready.Status, ready.Reason, ready.Message, tc.ready, tc.readyReason)
			}
			if sched.Reason != tc.schedReason {
				t.Errorf("Schedulable reason %s (%s); want %s", sched.Reason, sched.Message, tc.schedReason)
			}
			if (sched.Status == metav1.ConditionTrue) != (tc.schedReason == macvirtv1alpha1.ReasonAsExpected) {
				t.Errorf("Schedulable %s with reason %s", sched.Status, sched.Reason)
			}
			if !strings.Contains(ready.Message, tc.wantInMessage) {
				t.Errorf("Ready message %q lacks %q", ready.Message, tc.wantInMessage)
			}
			if int(got.Status.Machines) != tc.placed {
				t.Errorf("machines %d; want %d", got.Status.Machines, tc.placed)
			}
			if got.RequeueAfter != tc.requeue {
				t.Errorf("requeue after %s; want %s", got.RequeueAfter, tc.requeue)
			}
		})
	}
}

// A heartbeat changes nothing the operator writes: each beat costs the
// agent's own write only.
func TestComputeHostStatusIsStable(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	beat := metav1.NewTime(now)
	h := &macvirtv1alpha1.MacHost{Status: macvirtv1alpha1.MacHostStatus{Agent: &macvirtv1alpha1.HostAgentReport{Slots: 2, LastHeartbeat: &beat}}}
	h.Status = computeHostStatus(&scope{Now: now, Host: h, BeatSeenAt: now}).Status
	later := h.DeepCopy()
	next := metav1.NewTime(now.Add(15 * time.Second))
	later.Status.Agent.LastHeartbeat = &next
	again := computeHostStatus(&scope{Now: now.Add(20 * time.Second), Host: later, BeatSeenAt: now.Add(15 * time.Second)}).Status
	if !equalConditions(h.Status.Conditions, again.Conditions) {
		t.Fatalf("status changed with time alone:\n%+v\n%+v", h.Status.Conditions, again.Conditions)
	}
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}
