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
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// vmConditionsNotSynced are the VirtualMachine conditions virt-controller
// manages itself rather than copying from the instance.
var vmConditionsNotSynced = map[kubevirtv1.VirtualMachineConditionType]bool{
	kubevirtv1.VirtualMachineReady:           true,
	kubevirtv1.VirtualMachineFailure:         true,
	kubevirtv1.VirtualMachineRestartRequired: true,
}

// syncVMConditions mirrors the instance's conditions onto the VirtualMachine
// like virt-controller: Ready always (False with reason VMINotExists when
// there is no instance), the others only while an instance exists.
func syncVMConditions(st *kubevirtv1.VirtualMachineStatus, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) {
	t := metav1.NewTime(now)
	ready := kubevirtv1.VirtualMachineCondition{
		Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
		Reason: "VMINotExists", Message: "VMI does not exist", LastProbeTime: t, LastTransitionTime: t,
	}
	if vmi != nil {
		ready.Reason, ready.Message = "VMIConditionMissing", "VMI is missing the Ready condition"
		if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady); c != nil {
			ready = vmConditionFrom(c)
		}
	}
	upsertVMCondition(st, ready)
	if vmi == nil {
		return
	}
	onVMI := map[kubevirtv1.VirtualMachineConditionType]bool{}
	for i := range vmi.Status.Conditions {
		c := vmConditionFrom(&vmi.Status.Conditions[i])
		if vmConditionsNotSynced[c.Type] {
			continue
		}
		onVMI[c.Type] = true
		upsertVMCondition(st, c)
	}
	kept := st.Conditions[:0]
	for _, c := range st.Conditions {
		if vmConditionsNotSynced[c.Type] || onVMI[c.Type] {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
}

func vmConditionFrom(c *kubevirtv1.VirtualMachineInstanceCondition) kubevirtv1.VirtualMachineCondition {
	return kubevirtv1.VirtualMachineCondition{
		Type: kubevirtv1.VirtualMachineConditionType(c.Type), Status: c.Status,
		Reason: c.Reason, Message: c.Message,
		LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
	}
}

// upsertVMCondition replaces a condition only when its status or reason
// changes, so repeated reconciles leave the status untouched.
func upsertVMCondition(st *kubevirtv1.VirtualMachineStatus, c kubevirtv1.VirtualMachineCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		if st.Conditions[i].Status != c.Status || st.Conditions[i].Reason != c.Reason {
			st.Conditions[i] = c
		}
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance,
	t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func vmiConditionStatus(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) corev1.ConditionStatus {
	if c := vmiCondition(vmi, t); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

// setVMICondition replaces or appends a condition, keeping the transition
// time when the status does not change. It reports whether anything changed.
func setVMICondition(vmi *kubevirtv1.VirtualMachineInstance, c kubevirtv1.VirtualMachineInstanceCondition) bool {
	old := vmiCondition(vmi, c.Type)
	if old == nil {
		vmi.Status.Conditions = append(vmi.Status.Conditions, c)
		return true
	}
	if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		return false
	}
	if old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	*old = c
	return true
}

// removeVMICondition drops a condition and reports whether it was present.
func removeVMICondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) bool {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			vmi.Status.Conditions = append(vmi.Status.Conditions[:i], vmi.Status.Conditions[i+1:]...)
			return true
		}
	}
	return false
}

func parseGeneration(s string) int64 {
	g, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return g
}
