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

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

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
			plan := clonePlan{strategy: strategy, populator: strategy != cdiv1.CloneStrategyHostAssisted}
			st, ok := nextDataVolumeStatus(clone, 2, dvFaults{clone: plan})
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

// TestClonePlansWalkThePlannersPhases: a restore skips the snapshot, a
// populator's copy ends with the rebind, at 100%, and a restore by copy
// restores, preps, copies and rebinds.
func TestClonePlansWalkThePlannersPhases(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		plan clonePlan
		want []string
	}{
		{clonePlan{strategy: cdiv1.CloneStrategySnapshot, fromSnapshot: true, populator: true}, []string{"Pending N/A", "CloneScheduled N/A",
			"CloneFromSnapshotSourceInProgress N/A", "PrepClaimInProgress N/A", "RebindInProgress N/A", "Succeeded 100.0%"}},
		{clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, populator: true}, []string{"Pending N/A", "CloneScheduled N/A",
			"CloneInProgress 0.00%", "CloneInProgress 50.00%", "RebindInProgress 100.0%", "Succeeded 100.0%"}},
		{clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, fromSnapshot: true, populator: true}, []string{"Pending N/A", "CloneScheduled N/A",
			"CloneFromSnapshotSourceInProgress N/A", "PrepClaimInProgress N/A", "CloneInProgress 0.00%", "CloneInProgress 50.00%",
			"RebindInProgress 100.0%", "Succeeded 100.0%"}},
	} {
		clone := &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Name: "base"}}}
		var seen []string
		for range tc.want {
			st, ok := nextDataVolumeStatus(clone, 2, dvFaults{clone: tc.plan})
			g.Expect(ok).To(BeTrue())
			clone.Status = st
			seen = append(seen, fmt.Sprintf("%s %s", st.Phase, st.Progress))
		}
		g.Expect(seen).To(Equal(tc.want), "plan %+v", tc.plan)
	}

	// A restore waits in CloneFromSnapshotSourceInProgress for its snapshot.
	restore := clonePlan{strategy: cdiv1.CloneStrategySnapshot, fromSnapshot: true, populator: true}
	dv := &cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{SourceRef: &cdiv1.DataVolumeSourceRef{Name: "base"}},
		Status: cdiv1.DataVolumeStatus{Phase: cdiv1.CloneFromSnapshotSourceInProgress}}
	_, ok := nextDataVolumeStatus(dv, 2, dvFaults{clone: restore, waitForSource: true})
	g.Expect(ok).To(BeFalse())
}
