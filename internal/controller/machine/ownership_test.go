package machine

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

const machineUID = types.UID("machine-uid")

// controlled gives obj a controller reference to the object of kind, name
// and uid.
func controlled[T metav1.Object](obj T, kind, name string, uid types.UID) T {
	t := true
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "x/v1", Kind: kind, Name: name, UID: uid, Controller: &t}})
	return obj
}

func withUID[T metav1.Object](obj T, uid types.UID) T {
	obj.SetUID(uid)
	obj.SetNamespace("ns")
	return obj
}

func ownedMachine(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	return machine(append([]func(*macvirtv1alpha1.MacMachine){func(m *macvirtv1alpha1.MacMachine) { m.UID = machineUID }}, mods...)...)
}

// The machine acts only on what it controls: observeObjects reads the
// objects under its names and keepOwned sets aside the others, which the
// status then reports.
func TestComputeMachineStatusForObjectsItDoesNotControl(t *testing.T) {
	ours := func() *kubevirtv1.VirtualMachine {
		return controlled(withUID(vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), "vm-uid"), "MacMachine", "m", machineUID)
	}
	someones := func() *kubevirtv1.VirtualMachine {
		return withUID(vm(kubevirtv1.RunStrategyAlways, kubevirtv1.VirtualMachineStatusRunning), "their-vm")
	}
	instanceOf := func(v *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
		return controlled(withUID(runningVMI(t0), "vmi-uid"), "VirtualMachine", v.Name, v.UID)
	}
	ownDisks := func() []*cdiv1.DataVolume {
		return []*cdiv1.DataVolume{
			controlled(withUID(dv("m-opencore", cdiv1.Succeeded, "100.0%"), "dv1"), "MacMachine", "m", machineUID),
			controlled(withUID(dv("m-system", cdiv1.Succeeded, "100.0%"), "dv2"), "MacMachine", "m", machineUID)}
	}
	labelled := func(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
		vmi.Labels = map[string]string{macvirtv1alpha1.LabelMachine: "m"}
		return vmi
	}
	killed := func(vmi *kubevirtv1.VirtualMachineInstance) *kubevirtv1.VirtualMachineInstance {
		now := metav1.NewTime(t0)
		vmi.DeletionTimestamp, vmi.Status.Phase = &now, kubevirtv1.Failed
		return vmi
	}
	stopped := func(m *macvirtv1alpha1.MacMachine) { f := false; m.Spec.Running = &f }
	theirs := someones()
	ourVM := ours()

	cases := map[string]struct {
		obs           machineObservation
		phase         macvirtv1alpha1.MachinePhase
		reason        string
		stalled       metav1.ConditionStatus
		says          []string // in Ready's message
		keepsVM       bool
		keepsVMI      bool
		keepsDisks    int
		foreign       int // objects set aside
		strayInstance bool
	}{
		"someone's VirtualMachine, named like the machine's, and its instance": {
			obs:     machineObservation{Machine: ownedMachine(), DataVolumes: []*cdiv1.DataVolume{nil, nil}, VM: theirs, VMI: instanceOf(theirs)},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachine ns/m (its controller: none) exists and is not controlled by this MacMachine",
				"macvirt never changes or deletes it: delete or rename it, or give the machine another name"}},
		"someone's VirtualMachine whose instance carries the machine's label": {
			obs:     machineObservation{Machine: ownedMachine(), DataVolumes: ownDisks(), VM: theirs, VMI: labelled(instanceOf(theirs))},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachine ns/m (its controller: none) exists"}, keepsDisks: 2},
		"a VirtualMachine left by an earlier machine of the same name": {
			obs: machineObservation{Machine: ownedMachine(), DataVolumes: ownDisks(),
				VM: controlled(someones(), "MacMachine", "m", "earlier-uid")},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachine ns/m (its controller: MacMachine m, uid earlier-uid)"}, keepsDisks: 2},
		"someone's DataVolume, named like the machine's first": {
			obs: machineObservation{Machine: ownedMachine(),
				DataVolumes: []*cdiv1.DataVolume{withUID(dv("m-opencore", cdiv1.Succeeded, "100.0%"), "their-dv"), nil}},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"DataVolume ns/m-opencore (its controller: none) exists and is not controlled by this MacMachine"}},
		"someone's VirtualMachine and DataVolumes": {
			obs: machineObservation{Machine: ownedMachine(), VM: someones(), DataVolumes: []*cdiv1.DataVolume{
				withUID(dv("m-opencore", cdiv1.Succeeded, ""), "a"), withUID(dv("m-system", cdiv1.Succeeded, ""), "b")}},
			foreign: 3, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachine ns/m (its controller: none); DataVolume ns/m-opencore (its controller: none); DataVolume ns/m-system (its controller: none) exist and are not controlled",
				"delete or rename them"}},
		"an instance the machine's VirtualMachine does not control": {
			obs:     machineObservation{Machine: ownedMachine(), DataVolumes: ownDisks(), VM: ourVM, VMI: withUID(runningVMI(t0), "standalone")},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachineInstance ns/m (its controller: none)"}, keepsVM: true, keepsDisks: 2, strayInstance: true},
		"an instance of another VirtualMachine's, with no VirtualMachine of the machine's": {
			obs:     machineObservation{Machine: ownedMachine(), DataVolumes: ownDisks(), VMI: instanceOf(theirs)},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachineInstance ns/m (its controller: VirtualMachine m, uid their-vm)"}, keepsDisks: 2},
		"a killed instance of someone's VirtualMachine is no forced power-off of the machine's": {
			obs: machineObservation{Machine: ownedMachine(stopped), DataVolumes: ownDisks(), VM: someones(),
				Killed: killed(labelled(instanceOf(theirs)))},
			foreign: 1, phase: macvirtv1alpha1.MachinePending, reason: macvirtv1alpha1.ReasonNotOwned, stalled: metav1.ConditionTrue,
			says: []string{"VirtualMachine ns/m (its controller: none)"}, keepsDisks: 2},
		"everything is the machine's": {
			obs: machineObservation{Now: t0.Add(time.Minute), Machine: ownedMachine(), DataVolumes: ownDisks(), VM: ourVM,
				VMI: labelled(instanceOf(ourVM))},
			phase: macvirtv1alpha1.MachineBooting, reason: macvirtv1alpha1.ReasonBooting, stalled: metav1.ConditionFalse,
			keepsVM: true, keepsVMI: true, keepsDisks: 2},
		"deleting leaves someone's VirtualMachine alone and says so, without stalling": {
			obs: machineObservation{Machine: ownedMachine(), Deleting: true, DeletionStep: "done",
				DataVolumes: []*cdiv1.DataVolume{nil, nil}, VM: someones(), VMI: instanceOf(theirs)},
			foreign: 1, phase: macvirtv1alpha1.MachineTerminating, reason: macvirtv1alpha1.ReasonDeleting, stalled: metav1.ConditionFalse,
			says: []string{"deleting: done; left alone, not controlled by this MacMachine: VirtualMachine ns/m (its controller: none)"}},
		"deleting is held while an instance its VirtualMachine does not control exists": {
			obs: machineObservation{Machine: ownedMachine(), Deleting: true, DeletionStep: "VirtualMachine ns/m is neither stopped nor deleted",
				DataVolumes: ownDisks(), VM: ourVM, VMI: withUID(runningVMI(t0), "standalone")},
			foreign: 1, phase: macvirtv1alpha1.MachineTerminating, reason: macvirtv1alpha1.ReasonDeleting, stalled: metav1.ConditionTrue,
			says: []string{"left alone, not controlled by this MacMachine: VirtualMachineInstance ns/m"}, keepsVM: true, keepsDisks: 2, strayInstance: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := tc.obs
			o.Class = class()
			o.DataVolumes = append([]*cdiv1.DataVolume(nil), o.DataVolumes...)
			allOwned := o.keepOwned()
			if allOwned != (tc.foreign == 0) || len(o.Foreign) != tc.foreign {
				t.Errorf("keepOwned = %v, Foreign %q; want %d set aside", allOwned, o.Foreign, tc.foreign)
			}
			if (o.VM != nil) != tc.keepsVM || (o.VMI != nil) != tc.keepsVMI || o.strayInstance != tc.strayInstance {
				t.Errorf("kept VM %v, VMI %v, stray instance %v; want %v, %v, %v", o.VM != nil, o.VMI != nil, o.strayInstance, tc.keepsVM, tc.keepsVMI, tc.strayInstance)
			}
			if o.Killed != nil {
				t.Errorf("kept the killed instance of a VirtualMachine not the machine's")
			}
			kept := 0
			for _, d := range o.DataVolumes {
				if d != nil {
					kept++
				}
			}
			if kept != tc.keepsDisks {
				t.Errorf("kept %d DataVolumes, want %d", kept, tc.keepsDisks)
			}
			got := computeMachineStatus(o)
			if got.Status.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", got.Status.Phase, tc.phase)
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.reason {
				t.Fatalf("Ready = %+v, want reason %s", ready, tc.reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(ready.Message, s) {
					t.Errorf("Ready says %q, want it to say %q", ready.Message, s)
				}
			}
			s := meta.FindStatusCondition(got.Status.Conditions, macvirtv1alpha1.ConditionStalled)
			if s == nil || s.Status != tc.stalled {
				t.Fatalf("Stalled = %+v, want %s", s, tc.stalled)
			}
			if s.Status == metav1.ConditionTrue && s.Reason != macvirtv1alpha1.ReasonNotOwned {
				t.Errorf("Stalled reason %s, want %s", s.Reason, macvirtv1alpha1.ReasonNotOwned)
			}
			if !tc.keepsVM && (got.Status.VirtualMachineName != "" || got.Status.NodeName != "" || len(got.Status.Addresses) > 0) {
				t.Errorf("status shows a VirtualMachine not the machine's: %+v", got.Status)
			}
		})
	}
}
