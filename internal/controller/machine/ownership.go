package machine

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
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
func notOwnedProblem(foreign []string) base.Problem {
	verb, pronoun := "exists and is", "it"
	if len(foreign) > 1 {
		verb, pronoun = "exist and are", "them"
	}
	return base.Problem{Reason: macvirtv1alpha1.ReasonNotOwned, Message: fmt.Sprintf(
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
