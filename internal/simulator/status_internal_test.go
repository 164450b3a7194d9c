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
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
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

func TestNextDataVolumeStatus(t *testing.T) {
	step := func(dv *cdiv1.DataVolume, f dvFaults) string {
		st, ok := nextDataVolumeStatus(dv, 2, f)
		if !ok {
			return "held"
		}
		dv.Status = st
		return fmt.Sprintf("%s %s %d", st.Phase, st.Progress, st.RestartCount)
	}
	none := dvFaults{}
	g := NewWithT(t)
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk"}}
	var seen []string
	for range 7 {
		seen = append(seen, step(dv, none))
	}
	g.Expect(seen).To(Equal([]string{"Pending N/A 0", "ImportScheduled N/A 0", "ImportInProgress 0.00% 0",
		"ImportInProgress 50.00% 0", "Succeeded 100.0% 0", "held", "held"}))

	// A failing pod is restarted: never Failed, restartCount grows, and the
	// transfer resumes once the pod succeeds.
	failed := dvFaults{failed: true}
	clone := &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Name: "base"}}}
	g.Expect([]string{step(clone, none), step(clone, none), step(clone, failed), step(clone, failed), step(clone, none), step(clone, none)}).
		To(Equal([]string{"Pending N/A 0", "CloneScheduled N/A 0", "CloneInProgress 0.00% 1", "CloneInProgress 0.00% 2",
			"CloneInProgress 0.00% 2", "CloneInProgress 50.00% 2"}))
	failing := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk"}}
	step(failing, none)
	step(failing, none)
	step(failing, failed)
	g.Expect(failing.Status.Conditions).To(ContainElement(And(HaveField("Type", cdiv1.DataVolumeRunning),
		HaveField("Status", corev1.ConditionFalse), HaveField("Reason", reasonError))))
	g.Expect(dataVolumeError(failing)).To(ContainSubstring("importer has stopped running due to an error"))

	// A quota refusal holds the DataVolume Pending, Bound=False.
	quota := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk"}}
	g.Expect([]string{step(quota, dvFaults{quota: true}), step(quota, dvFaults{quota: true}), step(quota, none), step(quota, none)}).
		To(Equal([]string{"Pending N/A 0", "held", "ImportScheduled N/A 0", "ImportInProgress 0.00% 0"}))

	// An unschedulable importer holds ImportScheduled, Running=False.
	unsched := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk"}}
	step(unsched, none)
	step(unsched, none)
	g.Expect([]string{step(unsched, dvFaults{unschedulable: true}), step(unsched, dvFaults{unschedulable: true})}).
		To(Equal([]string{"ImportScheduled N/A 0", "held"}))
	g.Expect(unsched.Status.Conditions).To(ContainElement(And(HaveField("Type", cdiv1.DataVolumeRunning),
		HaveField("Reason", "Unschedulable"), HaveField("Message", "Importer pod cannot be scheduled"))))

	// Waiting for a first consumer holds PendingPopulation.
	wffc := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "disk"}}
	w := dvFaults{waitForConsumer: true}
	g.Expect([]string{step(wffc, w), step(wffc, w), step(wffc, w), step(wffc, none)}).
		To(Equal([]string{"Pending N/A 0", "PendingPopulation N/A 0", "held", "ImportScheduled N/A 0"}))
}

func TestIPAddressForIsStablePerVirtualMachine(t *testing.T) {
	g := NewWithT(t)
	ip := IPAddressFor("lab", "sequoia")
	g.Expect(ip).To(MatchRegexp(`^10\.244\.\d{1,3}\.\d{1,3}$`))
	g.Expect(IPAddressFor("lab", "sequoia")).To(Equal(ip))
	g.Expect(IPAddressFor("lab", "sonoma")).NotTo(Equal(ip))
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "sequoia"}}
	g.Expect(podInterface(vmi)).To(And(HaveField("Name", "default"), HaveField("IP", ip)))
	g.Expect(vmiConditionStatus(vmi, kubevirtv1.VirtualMachineInstanceReady)).To(Equal(corev1.ConditionUnknown))
}

func TestSmartClonesReportNoProgressUntilDone(t *testing.T) {
	g := NewWithT(t)
	for strategy, want := range map[cdiv1.CDICloneStrategy][]string{
		cdiv1.CloneStrategyCsiClone: {"Pending N/A", "CloneScheduled N/A", "CSICloneInProgress N/A", "PrepClaimInProgress N/A",
			"RebindInProgress N/A", "Succeeded 100.0%", "held"},
		cdiv1.CloneStrategySnapshot: {"Pending N/A", "CloneScheduled N/A", "SnapshotForSmartCloneInProgress N/A",
			"CloneFromSnapshotSourceInProgress N/A", "PrepClaimInProgress N/A", "RebindInProgress N/A", "Succeeded 100.0%"},
		cdiv1.CloneStrategyHostAssisted: {"Pending N/A", "CloneScheduled N/A", "CloneInProgress 0.00%", "CloneInProgress 50.00%",
			"Succeeded 100.0%", "held", "held"},
	} {
		clone := &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Name: "base"}}}
		var seen []string
		for range want {
			st, ok := nextDataVolumeStatus(clone, 2, dvFaults{cloneStrategy: strategy})
			if !ok {
				seen = append(seen, "held")
				continue
			}
			clone.Status = st
			seen = append(seen, fmt.Sprintf("%s %s", st.Phase, st.Progress))
		}
		g.Expect(seen).To(Equal(want), "clone strategy %s", strategy)
	}
}

// A macOS guest behind masquerade sees only its side of KubeVirt's NAT: the
// second address of the network's vmNetworkCIDR. KubeVirt itself reports
// the virt-launcher pod's IP for the interface, from the domain and the pod
// cache alone (no QEMU guest agent in macOS).
func TestTheGuestSeesWhatKubeVirtsBindingGivesIt(t *testing.T) {
	g := NewWithT(t)
	vmi := func(binding kubevirtv1.InterfaceBindingMethod, cidr string) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "sequoia"}}
		v.Spec.Networks = []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{VMNetworkCIDR: cidr}}}}
		v.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "default", InterfaceBindingMethod: binding}}
		v.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{podInterface(v)}
		return v
	}
	masquerade := kubevirtv1.InterfaceBindingMethod{Masquerade: &kubevirtv1.InterfaceMasquerade{}}
	v := vmi(masquerade, "")
	g.Expect(GuestAddress(v)).To(Equal("10.0.2.2"))
	g.Expect(v.Status.Interfaces[0].IP).To(Equal(IPAddressFor("lab", "sequoia")))
	g.Expect(v.Status.Interfaces[0].InfoSource).To(Equal("domain"))
	g.Expect(v.Status.Interfaces[0].InterfaceName).To(BeEmpty(), "only a QEMU guest agent reports the guest's interface name")
	g.Expect(GuestAddress(vmi(masquerade, "192.168.77.0/24"))).To(Equal("192.168.77.2"))
	g.Expect(GuestAddress(vmi(kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}, ""))).
		To(Equal(IPAddressFor("lab", "sequoia")), "with bridge binding the guest gets the pod's IP")
}
