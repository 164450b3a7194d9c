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

package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// A machine's objects have fixed names (render.VirtualMachineName,
// render.DataVolumeNames), so a namespace may already hold objects of those
// names that are not the machine's: someone's own VM, or what an earlier
// machine of that name left. A name is not ownership. The machine acts only
// on what it controls: the VM and DataVolumes whose controller reference is
// the machine (render sets it), and the VMI whose controller reference is
// the machine's VM (KubeVirt's VM controller sets it). Anything else is set
// aside when it is read, never created over, changed, stopped or deleted,
// and reported (ReasonNotOwned).

const (
	kindMachine        = "MacMachine"
	kindVirtualMachine = "VirtualMachine"
	kindInstance       = "VirtualMachineInstance"
	kindDataVolume     = "DataVolume"
)

// controlledBy reports whether obj's controller reference is the object of
// kind with uid.
func controlledBy(obj metav1.Object, kind string, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && uid != "" && ref.UID == uid && ref.Kind == kind
}

// describeForeign names an object and its controller, for a message.
func describeForeign(kind string, obj metav1.Object) string {
	controller := "none"
	if ref := metav1.GetControllerOf(obj); ref != nil {
		controller = fmt.Sprintf("%s %s, uid %s", ref.Kind, ref.Name, ref.UID)
	}
	return fmt.Sprintf("%s %s/%s (its controller: %s)", kind, obj.GetNamespace(), obj.GetName(), controller)
}

// keepOwned sets aside what the observation holds that the machine does not
// control: a DataVolume or VM whose controller reference is not the machine,
// a VMI whose controller reference is not the machine's VM (or with no VM of
// the machine's), and a killed instance the watch kept that is not its VM's.
// What is set aside is named in Foreign, once each (an instance of a VM
// already named there is that VM's). It reports whether nothing was.
func (o *machineObservation) keepOwned() bool {
	m := o.Machine
	if vm := o.VM; vm != nil && !controlledBy(vm, kindMachine, m.UID) {
		o.Foreign = append(o.Foreign, describeForeign(kindVirtualMachine, vm))
		o.VM = nil
		if vmi := o.VMI; vmi != nil && controlledBy(vmi, kindVirtualMachine, vm.UID) {
			o.VMI = nil
		}
	}
	if vmi := o.VMI; vmi != nil && (o.VM == nil || !controlledBy(vmi, kindVirtualMachine, o.VM.UID)) {
		o.Foreign = append(o.Foreign, describeForeign(kindInstance, vmi))
		o.VMI = nil
		o.strayInstance = o.VM != nil
	}
	if k := o.Killed; k != nil && (o.VM == nil || !controlledBy(k, kindVirtualMachine, o.VM.UID)) {
		o.Killed = nil
	}
	for i, dv := range o.DataVolumes {
		if dv != nil && !controlledBy(dv, kindMachine, m.UID) {
			o.Foreign = append(o.Foreign, describeForeign(kindDataVolume, dv))
			o.DataVolumes[i] = nil
		}
	}
	return len(o.Foreign) == 0
}

// notOwnedProblem is the problem a machine reports while objects under its
// names are not its own, and what to do about it.
func notOwnedProblem(foreign []string) problem {
	verb, pronoun := "exists and is", "it"
	if len(foreign) > 1 {
		verb, pronoun = "exist and are", "them"
	}
	return problem{macvirtv1alpha1.ReasonNotOwned, fmt.Sprintf(
		"%s %s not controlled by this MacMachine; macvirt never changes or deletes %s: delete or rename %s, or give the machine another name",
		strings.Join(foreign, "; "), verb, pronoun, pronoun)}
}

// leftAlone is what a deleting machine says about the objects under its
// names that it does not control; empty when there are none.
func leftAlone(foreign []string) string {
	if len(foreign) == 0 {
		return ""
	}
	return "; left alone, not controlled by this MacMachine: " + strings.Join(foreign, "; ")
}

// readObjects reads the machine's DataVolumes, VM and VMI through c, nil
// for what does not exist, and keeps only those the machine controls. The
// instance is read before the VM: KubeVirt creates it after the VM, so an
// uncached read that finds an instance also finds its VM.
func readObjects(ctx context.Context, c client.Reader, o *machineObservation) error {
	m := o.Machine
	o.Foreign, o.strayInstance = nil, false
	o.DataVolumes = make([]*cdiv1.DataVolume, 0, 2)
	for _, name := range render.DataVolumeNames(m) {
		dv := &cdiv1.DataVolume{}
		if err := getOptional(ctx, c, types.NamespacedName{Namespace: m.Namespace, Name: name}, dv); err != nil {
			return err
		}
		if dv.Name == "" {
			dv = nil
		}
		o.DataVolumes = append(o.DataVolumes, dv)
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: render.VirtualMachineName(m)}
	vm, vmi := &kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}
	if err := getOptional(ctx, c, key, vmi); err != nil {
		return err
	}
	if err := getOptional(ctx, c, key, vm); err != nil {
		return err
	}
	o.VM, o.VMI = vm, vmi
	if vm.Name == "" {
		o.VM = nil
	}
	if vmi.Name == "" {
		o.VMI = nil
	}
	o.keepOwned()
	return nil
}

// observeOwned reads the machine's objects from the cache and, when some
// are not the machine's, again from the API server: a cache that has not
// caught up (an instance seen before its VM, an object already deleted)
// must not make the machine report, or leave alone, what is its own.
func (r *MacMachineReconciler) observeOwned(ctx context.Context, o *machineObservation) error {
	killed := o.Killed
	if err := readObjects(ctx, r.Client, o); err != nil || len(o.Foreign) == 0 || r.APIReader == nil {
		return err
	}
	o.Killed = killed
	return readObjects(ctx, r.APIReader, o)
}

// namesakeMachine maps an object whose controller is not a machine to the
// machine whose VM (or DataVolume) it is named like, when that machine
// exists: the machine reports it, and goes on once it is deleted or renamed.
// The machine's own objects reach it through their controller reference.
func (r *MacMachineReconciler) namesakeMachine(ctx context.Context, obj client.Object) []reconcile.Request {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kindMachine &&
		strings.HasPrefix(ref.APIVersion, macvirtv1alpha1.GroupVersion.Group+"/") {
		return nil
	}
	name := obj.GetName()
	if _, ok := obj.(*cdiv1.DataVolume); ok {
		var found bool
		if name, found = machineOfDataVolume(name); !found {
			return nil
		}
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}
	if err := r.Get(ctx, key, &macvirtv1alpha1.MacMachine{}); err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// machineOfDataVolume is the name of the machine a DataVolume of that name
// would belong to (see render.DataVolumeNames).
func machineOfDataVolume(name string) (string, bool) {
	for _, volume := range []string{render.BootloaderVolume, render.SystemVolume} {
		if machine, ok := strings.CutSuffix(name, "-"+volume); ok && machine != "" {
			return machine, true
		}
	}
	return "", false
}

// recordNotOwned announces, with a Warning event, that the machine has just
// found objects under its names that it does not control.
func (r *MacMachineReconciler) recordNotOwned(before, after *macvirtv1alpha1.MacMachine) {
	notOwned := func(m *macvirtv1alpha1.MacMachine) *metav1.Condition {
		c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != macvirtv1alpha1.ReasonNotOwned {
			return nil
		}
		return c
	}
	now := notOwned(after)
	if now == nil || notOwned(before) != nil {
		return
	}
	recordEvent(r.Recorder, after, corev1.EventTypeWarning, macvirtv1alpha1.ReasonNotOwned, "Reconcile", now.Message)
}
