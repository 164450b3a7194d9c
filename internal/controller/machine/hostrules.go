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
	"context"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// The host rules: what every macvirt VM carries for its host, one macOS
// slot requested and limited and evictionStrategy External, given to VMs
// an older operator made (drain.go explains the drains they make safe).

// hostRulesMissing reports a VM template without what every macvirt VM
// now carries for its host: one macOS slot requested and limited, and
// evictionStrategy External. VMs created by an older operator lack them.
func hostRulesMissing(vm *kubevirtv1.VirtualMachine) bool {
	t := vm.Spec.Template
	if t == nil {
		return false
	}
	name := corev1.ResourceName(macvirtv1alpha1.ResourceMacOSSlots)
	_, req := t.Spec.Domain.Resources.Requests[name]
	_, lim := t.Spec.Domain.Resources.Limits[name]
	s := t.Spec.EvictionStrategy
	return !req || !lim || s == nil || *s != kubevirtv1.EvictionStrategyExternal
}

// ensureHostRules answers: does the machine's VM ask for a macOS slot and
// keep drains from killing it? A VM an older operator created is patched
// (guarded by its resourceVersion); the change reaches KubeVirt at the
// VM's next start, and nothing is restarted for it. Its running instance
// keeps holding a licence without a slot, which the node controller
// subtracts from what the node advertises meanwhile.
func (r *Reconciler) ensureHostRules(ctx context.Context, o *machineObservation) (bool, error) {
	if o.VM == nil || !hostRulesMissing(o.VM) {
		return true, nil
	}
	// Best effort: stopping, starting and releasing must not wait on it.
	_ = r.patchVMTemplate(ctx, o, "its macOS slot request and evictionStrategy External",
		func(vm *kubevirtv1.VirtualMachine) { render.HostRules(&vm.Spec.Template.Spec) })
	return true, nil
}
