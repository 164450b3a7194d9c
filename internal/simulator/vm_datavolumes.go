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
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// dataVolumeNames lists the DataVolumes the VirtualMachine's volumes use.
func dataVolumeNames(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	var names []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume != nil && !slices.Contains(names, v.DataVolume.Name) {
			names = append(names, v.DataVolume.Name)
		}
	}
	return names
}

// vmsUsingDataVolume maps a DataVolume to the VirtualMachines in its
// namespace whose volumes use it.
func (r *vmReconciler) vmsUsingDataVolume(ctx context.Context, obj client.Object) []reconcile.Request {
	vms := &kubevirtv1.VirtualMachineList{}
	if err := r.sim.client.List(ctx, vms, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing VirtualMachines for DataVolume", "dataVolume", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range vms.Items {
		if slices.Contains(dataVolumeNames(&vms.Items[i]), obj.GetName()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vms.Items[i])})
		}
	}
	return reqs
}

// dataVolumesOf summarises the DataVolumes the VirtualMachine waits for.
func (r *vmReconciler) dataVolumesOf(ctx context.Context, vm *kubevirtv1.VirtualMachine) (dvSummary, error) {
	sum := dvSummary{ready: true}
	for _, name := range dataVolumeNames(vm) {
		dv := &cdiv1.DataVolume{}
		err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, dv)
		switch {
		case apierrors.IsNotFound(err):
			sum.ready, sum.provisioning = false, true
			continue
		case err != nil:
			return sum, fmt.Errorf("getting DataVolume %s/%s: %w", vm.Namespace, name, err)
		}
		if msg := dataVolumeError(dv); msg != "" && sum.failure == "" {
			sum.failure = msg
		}
		if dv.Status.Phase != cdiv1.Succeeded {
			sum.ready = false
			sum.provisioning = sum.provisioning || dv.Status.Phase != cdiv1.Failed
		}
	}
	return sum, nil
}

// dataVolumeError describes a failed DataVolume the way KubeVirt detects
// one: phase Failed, or a Running=False condition with reason Error.
func dataVolumeError(dv *cdiv1.DataVolume) string {
	if dv.Status.Phase == cdiv1.Failed {
		return fmt.Sprintf("DataVolume %s is in Failed phase", dv.Name)
	}
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeRunning && c.Status == corev1.ConditionFalse && c.Reason == reasonError {
			return fmt.Sprintf("DataVolume %s importer has stopped running due to an error: %s", dv.Name, c.Message)
		}
	}
	return ""
}

// ensureTemplateDataVolumes creates the DataVolumes of
// spec.dataVolumeTemplates that do not exist yet, owned by the VirtualMachine.
func (r *vmReconciler) ensureTemplateDataVolumes(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	for i := range vm.Spec.DataVolumeTemplates {
		tmpl := &vm.Spec.DataVolumeTemplates[i]
		key := types.NamespacedName{Namespace: vm.Namespace, Name: tmpl.Name}
		err := r.sim.client.Get(ctx, key, &cdiv1.DataVolume{})
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting DataVolume %s: %w", key, err)
		}
		dv := &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{
				Name: tmpl.Name, Namespace: vm.Namespace,
				Labels: maps.Clone(tmpl.Labels), Annotations: maps.Clone(tmpl.Annotations),
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		if err := r.sim.client.Create(ctx, dv); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DataVolume %s: %w", key, err)
		}
		ctrl.LoggerFrom(ctx).Info("Created DataVolume from template", "dataVolume", tmpl.Name)
	}
	return nil
}
