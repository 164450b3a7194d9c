package machine

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// diskSource is what the operator read of a DataVolume's DataSource, for a
// DataVolume CDI has not reported on yet.
type diskSource struct {
	Key   types.NamespacedName
	Found bool
	// Ready is the DataSource's Ready condition; nil when CDI set none.
	Ready *cdiv1.DataSourceCondition
}

// isHalted reports whether the VM is asked not to run, by runStrategy or by
// the deprecated running field.
func isHalted(vm *kubevirtv1.VirtualMachine) bool {
	if vm.Spec.RunStrategy != nil {
		return *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted
	}
	return vm.Spec.Running != nil && !*vm.Spec.Running
}

// machineObservation is everything a reconcile read about one machine. The
// status is computed from it alone, so a restarted operator that observes
// the same objects computes the same phase.
type machineObservation struct {
	Now time.Time
	// Killed is an instance of the machine that the watch saw KubeVirt
	// kill at the end of a graceful stop, and that the cache no longer
	// holds (it goes soon after): a slow or busy operator still reports it.
	Killed *kubevirtv1.VirtualMachineInstance
	// ListeningSince is when the operator's agent endpoint began to listen
	// (at the latest, when this operator started): no guest is judged
	// silent for a time when nobody could have heard it.
	ListeningSince time.Time
	Machine        *macvirtv1alpha1.MacMachine
	// Class is what the machine renders and observes from: its live class,
	// or the snapshot of its recorded revision. Nil when neither exists.
	Class *macvirtv1alpha1.MacClass
	// ClassProblem says why Class is not the live class at the machine's
	// revision (deleted, or changed since); nil when it is.
	ClassProblem *base.Problem
	// Blocked, when set, is a problem that needs a human before the machine
	// can be rendered (an unreadable Secret, an unrenderable class).
	Blocked *base.Problem
	// BlockedRecheck, when set, is when a Blocked problem that can end by
	// itself is looked at again (nothing watched announces its end).
	BlockedRecheck time.Duration
	// hookAnnotationsStale, when set, says why the VM's template does not
	// carry the domain settings of the operator's transport; the VM is not
	// started meanwhile.
	hookAnnotationsStale error
	// DataVolumes holds the rendered DataVolumes' live objects, bootloader
	// first; an entry is nil while that DataVolume does not exist.
	DataVolumes []*cdiv1.DataVolume
	// DiskSources holds, by DataVolume name, the DataSource of each
	// DataVolume CDI has not reported on yet.
	DiskSources map[string]*diskSource
	VM          *kubevirtv1.VirtualMachine
	VMI         *kubevirtv1.VirtualMachineInstance
	// Observed is true once the VM and VMI were read in this reconcile;
	// what only they can tell (a drain) is kept as it was otherwise.
	Observed bool
	// Foreign names, with its controller, each object under the machine's
	// names that the machine does not control (a VM or DataVolume whose
	// controller reference is not the machine, a VMI whose controller
	// reference is not the machine's VM). They were set aside when read
	// (DataVolumes, VM and VMI hold only the machine's own) and are never
	// written: the machine is Pending and Stalled (ReasonNotOwned) while
	// they exist, and a deleting machine leaves them as they are.
	Foreign []string
	// strayInstance is true when the VMI set aside carries the name of a VM
	// the machine controls: that VM is neither stopped nor deleted while it
	// exists, since KubeVirt could act on the instance by its name.
	strayInstance bool
	// StopError is the failure of a stop request made in this reconcile.
	StopError error
	// WriteFailed is a create the API server refused in this reconcile,
	// in its words.
	WriteFailed *base.Problem
	// Deleting is true once the machine has a deletion timestamp;
	// DeletionStep says what deletion waits for.
	Deleting     bool
	DeletionStep string
	// Released is true once this reconcile deleted the machine because its
	// claim is gone (reclaimPolicy Delete). Nothing else was observed, so
	// no status is computed from it: the deletion's own reconcile writes
	// the machine's status.
	Released bool

	// Host is the MacHost a Virtualization machine is placed on, as read
	// in this reconcile (HostObserved); nil when it is gone.
	Host         *macvirtv1alpha1.MacHost
	HostObserved bool
	// Unplaced says why no host takes a Virtualization machine yet.
	Unplaced *base.Problem
	// rendered memoizes this reconcile's rendering.
	rendered *renderedObjects
}

// renderedObjects is what render produced for the machine.
type renderedObjects struct {
	vm          *kubevirtv1.VirtualMachine
	dataVolumes []cdiv1.DataVolume
}

func wantsRunning(m *macvirtv1alpha1.MacMachine) bool {
	return m.Spec.Running == nil || *m.Spec.Running
}
