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

package machine

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestStopNeeded(t *testing.T) {
	vmWith := func(s kubevirtv1.VirtualMachineRunStrategy, reqs ...kubevirtv1.VirtualMachineStateChangeRequest) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{
			Spec:   kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(s)},
			Status: kubevirtv1.VirtualMachineStatus{StateChangeRequests: reqs},
		}
	}
	stopOf := func(uid types.UID) kubevirtv1.VirtualMachineStateChangeRequest {
		return kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StopRequest, UID: ptr.To(uid)}
	}
	vmiIn := func(phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "vmi"},
			Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
	}
	tests := map[string]struct {
		vm   *kubevirtv1.VirtualMachine
		vmi  *kubevirtv1.VirtualMachineInstance
		want bool
	}{
		"always, running":                  {vm: vmWith(kubevirtv1.RunStrategyAlways), vmi: vmiIn(kubevirtv1.Running), want: true},
		"always, no instance":              {vm: vmWith(kubevirtv1.RunStrategyAlways), want: true},
		"halted":                           {vm: vmWith(kubevirtv1.RunStrategyHalted), vmi: vmiIn(kubevirtv1.Running), want: false},
		"running false":                    {vm: &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{Running: ptr.To(false)}}, want: false},
		"manual, running":                  {vm: vmWith(kubevirtv1.RunStrategyManual), vmi: vmiIn(kubevirtv1.Running), want: true},
		"manual, stop pending":             {vm: vmWith(kubevirtv1.RunStrategyManual, stopOf("vmi")), vmi: vmiIn(kubevirtv1.Running), want: false},
		"manual, stop for an old instance": {vm: vmWith(kubevirtv1.RunStrategyManual, stopOf("old")), vmi: vmiIn(kubevirtv1.Running), want: true},
		"manual, no instance":              {vm: vmWith(kubevirtv1.RunStrategyManual), want: false},
		"manual, instance succeeded":       {vm: vmWith(kubevirtv1.RunStrategyManual), vmi: vmiIn(kubevirtv1.Succeeded), want: false},
		"rerun, running":                   {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), vmi: vmiIn(kubevirtv1.Running), want: true},
		"rerun, no instance":               {vm: vmWith(kubevirtv1.RunStrategyRerunOnFailure), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(stopNeeded(tc.vm, tc.vmi)).To(Equal(tc.want))
		})
	}
}
