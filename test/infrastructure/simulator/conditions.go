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
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// vmiCondition returns the instance's condition of type t, or nil.
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
