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
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func vmWith(strategy kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(strategy),
		Template:    &kubevirtv1.VirtualMachineInstanceTemplateSpec{},
	}}
}

func vmiIn(phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "vmi"}}
	if phase != kubevirtv1.VmPhaseUnset {
		setVMIPhase(vmi, phase, time.Now())
	}
	return vmi
}

func TestPrintableStatus(t *testing.T) {
	now := time.Now()
	deleted := metav1.NewTime(now)
	unschedulable := vmiIn(kubevirtv1.Scheduling)
	stepVMI(unschedulable, vmiFaults{unschedulable: true}, placement{Node: "node"}, now)
	stopping := vmiIn(kubevirtv1.Running)
	stopping.DeletionTimestamp = &deleted
	terminating := vmWith(kubevirtv1.RunStrategyAlways)
	terminating.DeletionTimestamp = &deleted
	crashed := vmWith(kubevirtv1.RunStrategyAlways)
	crashed.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1}
	paused := vmiIn(kubevirtv1.Running)
	syncPaused(paused, true, now)
	migrating := vmiIn(kubevirtv1.Running)
	syncMigration(migrating, true, now)
	pullFailing := func(reason string) *kubevirtv1.VirtualMachineInstance {
		vmi := vmiIn(kubevirtv1.Scheduling)
		setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceSynchronized,
			Status: corev1.ConditionFalse, Reason: reason})
		return vmi
	}

	tests := map[string]struct {
		vm            *kubevirtv1.VirtualMachine
		vmi           *kubevirtv1.VirtualMachineInstance
		dvs           dvSummary
		startExpected bool
		want          kubevirtv1.VirtualMachinePrintableStatus
	}{
		"deleted VM":                 {vm: terminating, vmi: vmiIn(kubevirtv1.Running), want: kubevirtv1.VirtualMachineStatusTerminating},
		"deleted instance":           {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: stopping, want: kubevirtv1.VirtualMachineStatusStopping},
		"halted with live instance":  {vm: vmWith(kubevirtv1.RunStrategyHalted), vmi: vmiIn(kubevirtv1.Running), want: kubevirtv1.VirtualMachineStatusStopping},
		"running instance":           {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: vmiIn(kubevirtv1.Running), want: kubevirtv1.VirtualMachineStatusRunning},
		"failed DataVolume":          {vm: vmWith(kubevirtv1.RunStrategyAlways), dvs: dvSummary{failure: "x", provisioning: true}, want: kubevirtv1.VirtualMachineStatusDataVolumeError},
		"unschedulable instance":     {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: unschedulable, want: kubevirtv1.VirtualMachineStatusUnschedulable},
		"importing DataVolume":       {vm: vmWith(kubevirtv1.RunStrategyAlways), dvs: dvSummary{provisioning: true}, want: kubevirtv1.VirtualMachineStatusProvisioning},
		"instance about to be made":  {vm: vmWith(kubevirtv1.RunStrategyAlways), startExpected: true, want: kubevirtv1.VirtualMachineStatusStarting},
		"instance scheduling":        {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: vmiIn(kubevirtv1.Scheduling), want: kubevirtv1.VirtualMachineStatusStarting},
		"start failure, no instance": {vm: crashed, want: kubevirtv1.VirtualMachineStatusCrashLoopBackOff},
		"halted, no instance":        {vm: vmWith(kubevirtv1.RunStrategyHalted), want: kubevirtv1.VirtualMachineStatusStopped},
		"paused instance":            {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: paused, want: kubevirtv1.VirtualMachineStatusPaused},
		"migrating instance":         {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: migrating, want: kubevirtv1.VirtualMachineStatusMigrating},
		"image pull failing":         {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: pullFailing(reasonErrImagePull), want: kubevirtv1.VirtualMachineStatusErrImagePull},
		"image pull backing off":     {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: pullFailing(reasonImagePullBackOff), want: kubevirtv1.VirtualMachineStatusImagePullBackOff},
		"image pull, provisioning":   {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: pullFailing(reasonErrImagePull), dvs: dvSummary{provisioning: true}, want: kubevirtv1.VirtualMachineStatusProvisioning},
		"instance powered off":       {vm: vmWith(kubevirtv1.RunStrategyHalted), vmi: vmiIn(kubevirtv1.Succeeded), want: kubevirtv1.VirtualMachineStatusStopped},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			strategy, err := tc.vm.RunStrategy()
			g.Expect(err).NotTo(HaveOccurred())
			v := vmView{vm: tc.vm, vmi: tc.vmi, dvs: tc.dvs, now: now}
			g.Expect(printableStatus(v, &tc.vm.Status, strategy, tc.startExpected, false)).To(Equal(tc.want))
		})
	}
}

// withRequests is a VirtualMachine with the given state change requests.
func withRequests(strategy kubevirtv1.VirtualMachineRunStrategy, reqs ...kubevirtv1.VirtualMachineStateChangeRequest) *kubevirtv1.VirtualMachine {
	vm := vmWith(strategy)
	vm.Status.StateChangeRequests = reqs
	return vm
}

func stopOf(uid types.UID) kubevirtv1.VirtualMachineStateChangeRequest {
	return kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StopRequest, UID: ptr.To(uid)}
}

func startReq() kubevirtv1.VirtualMachineStateChangeRequest {
	return kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StartRequest}
}

// rerunStarted is a RerunOnFailure VirtualMachine that ran before (its
// status records the strategy) and has no request pending.
func rerunStarted() *kubevirtv1.VirtualMachine {
	vm := vmWith(kubevirtv1.RunStrategyRerunOnFailure)
	vm.Status.RunStrategy = kubevirtv1.RunStrategyRerunOnFailure
	return vm
}

func TestSyncStateChangeRequests(t *testing.T) {
	deleting := vmiIn(kubevirtv1.Running)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	tests := map[string]struct {
		vm     *kubevirtv1.VirtualMachine
		vmi    *kubevirtv1.VirtualMachineInstance
		action vmAction
		want   []kubevirtv1.VirtualMachineStateChangeRequest
	}{
		"stop kept while its instance exists":  {vm: withRequests(kubevirtv1.RunStrategyManual, stopOf("vmi")), vmi: deleting, want: []kubevirtv1.VirtualMachineStateChangeRequest{stopOf("vmi")}},
		"stop cleared once the instance gone":  {vm: withRequests(kubevirtv1.RunStrategyManual, stopOf("vmi"))},
		"stop cleared for another instance":    {vm: withRequests(kubevirtv1.RunStrategyManual, stopOf("old")), vmi: vmiIn(kubevirtv1.Running)},
		"start kept until an instance runs":    {vm: withRequests(kubevirtv1.RunStrategyManual, startReq()), want: []kubevirtv1.VirtualMachineStateChangeRequest{startReq()}},
		"start cleared once an instance lives": {vm: withRequests(kubevirtv1.RunStrategyManual, startReq()), vmi: vmiIn(kubevirtv1.Scheduling)},
		"rerun adds a start for a failed one": {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), vmi: vmiIn(kubevirtv1.Failed), action: actDelete,
			want: []kubevirtv1.VirtualMachineStateChangeRequest{startReq()}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := *tc.vm.Status.DeepCopy()
			strategy, err := tc.vm.RunStrategy()
			g.Expect(err).NotTo(HaveOccurred())
			syncStateChangeRequests(&st, strategy, vmView{vm: tc.vm, vmi: tc.vmi}, tc.action)
			g.Expect(st.StateChangeRequests).To(Equal(tc.want))
		})
	}
}

func TestDecideVM(t *testing.T) {
	now := time.Now()
	later := metav1.NewTime(now.Add(time.Minute))
	backingOff := vmWith(kubevirtv1.RunStrategyAlways)
	backingOff.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1, RetryAfterTimestamp: &later}
	ready := dvSummary{templatesReady: true}

	tests := map[string]struct {
		vm      *kubevirtv1.VirtualMachine
		vmi     *kubevirtv1.VirtualMachineInstance
		dvs     dvSummary
		want    vmAction
		requeue bool
	}{
		"always, disks ready":     {vm: vmWith(kubevirtv1.RunStrategyAlways), dvs: ready, want: actCreate},
		"always, disks importing": {vm: vmWith(kubevirtv1.RunStrategyAlways), dvs: dvSummary{provisioning: true}, want: actNone},
		// Standalone DataVolumes do not hold the instance back: it waits
		// in phase Pending (pkg/virt-controller/watch/vm/vm.go).
		"always, standalone disks importing": {vm: vmWith(kubevirtv1.RunStrategyAlways),
			dvs: dvSummary{templatesReady: true, provisioning: true}, want: actCreate},
		"always, backing off":      {vm: backingOff, dvs: ready, want: actNone, requeue: true},
		"always, instance failed":  {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: vmiIn(kubevirtv1.Failed), want: actDelete},
		"halted, instance running": {vm: vmWith(kubevirtv1.RunStrategyHalted), vmi: vmiIn(kubevirtv1.Running), want: actDelete},
		"halted, no instance":      {vm: vmWith(kubevirtv1.RunStrategyHalted), dvs: ready, want: actNone},
		// syncRunStrategy removes a Succeeded instance too, but starts no
		// other (setToStart below).
		"rerun, instance succeeded":  {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), vmi: vmiIn(kubevirtv1.Succeeded), want: actDelete},
		"rerun, instance failed":     {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), vmi: vmiIn(kubevirtv1.Failed), want: actDelete},
		"manual, no instance":        {vm: vmWith(kubevirtv1.RunStrategyManual), dvs: ready, want: actNone},
		"always, instance scheduled": {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: vmiIn(kubevirtv1.Scheduled), want: actNone},
		// State change requests recorded by virt-api's stop endpoint
		// (pkg/virt-controller/watch/vm/vm.go, syncRunStrategy).
		"manual, stop requested":           {vm: withRequests(kubevirtv1.RunStrategyManual, stopOf("vmi")), vmi: vmiIn(kubevirtv1.Running), want: actDelete},
		"manual, stop for another":         {vm: withRequests(kubevirtv1.RunStrategyManual, stopOf("old")), vmi: vmiIn(kubevirtv1.Running), want: actNone},
		"manual, running":                  {vm: vmWith(kubevirtv1.RunStrategyManual), vmi: vmiIn(kubevirtv1.Running), want: actNone},
		"manual, start requested":          {vm: withRequests(kubevirtv1.RunStrategyManual, startReq()), dvs: ready, want: actCreate},
		"rerun, stop requested":            {vm: withRequests(kubevirtv1.RunStrategyRerunOnFailure, stopOf("vmi")), vmi: vmiIn(kubevirtv1.Running), want: actDelete},
		"rerun, stopped by request":        {vm: rerunStarted(), dvs: ready, want: actNone},
		"rerun, never started":             {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), dvs: ready, want: actCreate},
		"rerun, start requested":           {vm: withRequests(kubevirtv1.RunStrategyRerunOnFailure, startReq()), dvs: ready, want: actCreate},
		"always, stop requested (restart)": {vm: withRequests(kubevirtv1.RunStrategyAlways, stopOf("vmi")), vmi: vmiIn(kubevirtv1.Running), want: actDelete},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			action, requeue := decideVM(vmView{vm: tc.vm, vmi: tc.vmi, dvs: tc.dvs, now: now})
			g.Expect(action).To(Equal(tc.want))
			if tc.requeue {
				g.Expect(requeue).To(BeNumerically(">", 0))
			} else {
				g.Expect(requeue).To(BeZero())
			}
		})
	}
}

func TestStartFailureBackoffGrowsAndIsCapped(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := kubevirtv1.VirtualMachineStatus{}
	seconds := []time.Duration{1, 2, 5, 8, 13, 15, 15}
	for i, want := range seconds {
		vmi := vmiIn(kubevirtv1.Failed)
		vmi.UID = types.UID(fmt.Sprintf("uid-%d", i))
		syncStartFailure(&st, kubevirtv1.RunStrategyAlways, vmView{vmi: vmi, now: now, backoff: 500 * time.Millisecond})
		g.Expect(st.StartFailure.ConsecutiveFailCount).To(Equal(i + 1))
		g.Expect(st.StartFailure.RetryAfterTimestamp.Sub(now)).To(Equal(want*time.Second), "failure %d", i+1)
	}
	syncStartFailure(&st, kubevirtv1.RunStrategyAlways, vmView{vmi: vmiIn(kubevirtv1.Running), now: now})
	g.Expect(st.StartFailure).To(BeNil())
}
