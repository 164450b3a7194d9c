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
	"time"

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

// dataVolumesOf summarises the DataVolumes the VirtualMachine's volumes use.
// Like virt-controller's VirtualMachine controller (pkg/virt-controller/
// watch/vm/vm.go, handleDataVolumes) only the DataVolumes of
// spec.dataVolumeTemplates hold the instance's creation back; standalone
// DataVolumes are waited for by the instance itself (see
// instanceDataVolumes). Like HasDataVolumeProvisioning in
// pkg/storage/types/dv.go, a DataVolume that does not exist is not
// "provisioning".
func (r *vmReconciler) dataVolumesOf(ctx context.Context, vm *kubevirtv1.VirtualMachine) (dvSummary, error) {
	sum := dvSummary{}
	templated := map[string]bool{}
	for _, t := range vm.Spec.DataVolumeTemplates {
		templated[t.Name] = true
	}
	for _, name := range dataVolumeNames(vm) {
		dv := &cdiv1.DataVolume{}
		err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, dv)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return sum, fmt.Errorf("getting DataVolume %s/%s: %w", vm.Namespace, name, err)
		}
		if msg := dataVolumeError(dv); msg != "" && sum.failure == "" {
			sum.failure = msg
		}
		sum.provisioning = sum.provisioning || dv.Status.Phase != cdiv1.Succeeded
	}
	sum.templatesReady = true
	for name := range templated {
		dv := &cdiv1.DataVolume{}
		err := r.sim.client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, dv)
		if err != nil && !apierrors.IsNotFound(err) {
			return sum, fmt.Errorf("getting DataVolume %s/%s: %w", vm.Namespace, name, err)
		}
		if err != nil || dv.Status.Phase != cdiv1.Succeeded {
			sum.templatesReady = false
		}
	}
	return sum, nil
}

// volumeState is what virt-controller's instance controller sees of the
// DataVolumes an instance's volumes use.
type volumeState struct {
	// ready is true when every DataVolume exists and Succeeded.
	ready bool
	// failed is true when one of them is in phase Failed.
	failed bool
	// missing names the first DataVolume that does not exist, if any.
	missing string
	// dataVolumesReady is the aggregated DataVolumesReady condition; nil
	// when the instance uses no DataVolume that exists.
	dataVolumesReady *kubevirtv1.VirtualMachineInstanceCondition
}

// instanceDataVolumes reads the DataVolumes the instance's volumes use, as
// pkg/virt-controller/watch/vmi/datavolumes.go does (areDataVolumesReady,
// aggregateDataVolumesConditions). The simulator has no PVCs: a DataVolume
// that exists stands for its PVC, which CDI creates at once.
func (s *Simulator) instanceDataVolumes(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (volumeState, error) {
	st := volumeState{ready: true}
	var agg *kubevirtv1.VirtualMachineInstanceCondition
	for _, v := range vmi.Spec.Volumes {
		if v.DataVolume == nil || v.DataVolume.Hotpluggable {
			continue
		}
		dv := &cdiv1.DataVolume{}
		err := s.client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: v.DataVolume.Name}, dv)
		if apierrors.IsNotFound(err) {
			st.ready = false
			if st.missing == "" {
				st.missing = v.DataVolume.Name
			}
			continue
		}
		if err != nil {
			return st, fmt.Errorf("getting DataVolume %s/%s: %w", vmi.Namespace, v.DataVolume.Name, err)
		}
		if dv.Status.Phase != cdiv1.Succeeded {
			st.ready = false
		}
		st.failed = st.failed || dv.Status.Phase == cdiv1.Failed
		if agg == nil {
			agg = &kubevirtv1.VirtualMachineInstanceCondition{
				Type: kubevirtv1.VirtualMachineInstanceDataVolumesReady, Status: corev1.ConditionTrue,
				Reason:  kubevirtv1.VirtualMachineInstanceReasonAllDVsReady,
				Message: "All of the VMI's DVs are bound and ready",
			}
		}
		if ready := dataVolumeReadyStatus(dv); ready != corev1.ConditionTrue {
			agg.Reason, agg.Message = kubevirtv1.VirtualMachineInstanceReasonNotAllDVsReady, "Not all of the VMI's DVs are ready"
			if ready == corev1.ConditionFalse || agg.Status == corev1.ConditionTrue {
				agg.Status = ready
			}
		}
	}
	st.dataVolumesReady = agg
	return st, nil
}

// dataVolumeReadyStatus is the status of the DataVolume's Ready condition,
// Unknown when it has none.
func dataVolumeReadyStatus(dv *cdiv1.DataVolume) corev1.ConditionStatus {
	for _, c := range dv.Status.Conditions {
		if c.Type == cdiv1.DataVolumeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// instancesUsingDataVolume maps a DataVolume to the instances in its
// namespace whose volumes use it.
func (r *vmiReconciler) instancesUsingDataVolume(ctx context.Context, obj client.Object) []reconcile.Request {
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := r.sim.client.List(ctx, vmis, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing VirtualMachineInstances for DataVolume", "dataVolume", obj.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range vmis.Items {
		for _, v := range vmis.Items[i].Spec.Volumes {
			if v.DataVolume != nil && v.DataVolume.Name == obj.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vmis.Items[i])})
				break
			}
		}
	}
	return reqs
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

// holdForDataVolumes keeps a Pending instance Pending while the DataVolumes
// its volumes use are populated, as virt-controller's instance controller
// does ("Delaying pod creation while DataVolume populates",
// pkg/virt-controller/watch/vmi/lifecycle.go, sync and updateStatus): the
// DataVolumesReady condition aggregates their Ready conditions; a DataVolume
// that does not exist yet (no PVC to find) adds PodScheduled=False, reason
// Unschedulable; a Failed one fails the instance. It writes what changed
// and reports whether the instance must not go on to Scheduling yet.
func (s *Simulator) holdForDataVolumes(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	vols, err := s.instanceDataVolumes(ctx, vmi)
	if err != nil {
		return true, err
	}
	changed := false
	if vols.dataVolumesReady != nil {
		c := *vols.dataVolumesReady
		c.LastProbeTime = metav1.Now()
		c.LastTransitionTime = c.LastProbeTime
		changed = setVMICondition(vmi, c)
	}
	switch {
	case vols.failed:
		setVMIPhase(vmi, kubevirtv1.Failed, time.Now())
		changed = true
	case vols.missing != "":
		now := metav1.Now()
		changed = setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
			Type:   kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message:       fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, vols.missing),
			LastProbeTime: now, LastTransitionTime: now,
		}) || changed
	}
	if changed {
		if err := s.client.Update(ctx, vmi); err != nil {
			return true, fmt.Errorf("updating VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("VirtualMachineInstance waits for its DataVolumes", "phase", vmi.Status.Phase)
		return true, nil
	}
	return !vols.ready, nil
}
