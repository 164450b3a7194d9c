package machine

import (
	"context"
	"fmt"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/vmstop"
)

// Reconciler turns a MacMachine into a KubeVirt VirtualMachine and
// CDI DataVolumes, walks it through its phases, stops it gracefully and
// deletes it safely.
type Reconciler struct {
	client.Client
	// APIReader reads uncached, for Secrets the cache does not hold.
	APIReader client.Reader
	// Classes finds the class a machine is made of: its live class, or the
	// snapshot of its revision once the class changed or went. Its
	// snapshot reader should be a cache (operator.New makes one): bound
	// machines of an old revision read theirs on every reconcile. Reads
	// classes through Client when unset, and no snapshots.
	Classes classhistory.Resolver
	// Recorder records events on phase changes.
	Recorder events.EventRecorder
	// Stopper requests graceful stops through KubeVirt's stop subresource.
	Stopper vmstop.Stopper
	// Render holds operator-wide render settings (hook image, emulator).
	Render render.Options
	// DomainHook, when set, says whether the objects of the domain-hook
	// transport are in place (nil when they are); a VM is neither created
	// nor started while it returns an error.
	DomainHook func() error
	// Agent is what machines' agent config disks say about the endpoint.
	Agent guestendpoint.Address
	// Tunnel is the operator's pods, which bound machines let in for the
	// tunnel through the API server; nil when it serves none.
	Tunnel *networkingv1.NetworkPolicyPeer
	// Clock is the time source for boot and heartbeat timeouts.
	Clock clock.PassiveClock
	// ListeningSince reports when the agent endpoint began to listen (zero
	// while it does not). Timeouts never run from before it, nor from before
	// the controller started (which stands in for it when nil or zero).
	ListeningSince func() time.Time

	started time.Time
	// MaxConcurrentReconciles is how many machines are reconciled at once
	// (one when unset). Machines share only what is guarded here: the
	// placement lock and the assumed records below. A burst of claims
	// binding warm Macs is a burst of machines to reconcile, each a few
	// round trips; one worker made them queue one after another.
	MaxConcurrentReconciles int
	// ControllerName overrides the controller's name, so tests can run
	// several managers in one process.
	ControllerName string
	// WatchHosts follows MacHosts (placement, lost Macs); false where the
	// API server does not serve them.
	WatchHosts bool

	// killed holds, per machine, an instance the watch saw KubeVirt kill at
	// the end of a graceful stop, until the machine's status records it:
	// the instance may be gone from the cache before the machine is
	// reconciled.
	killed base.Assumed[types.NamespacedName, *kubevirtv1.VirtualMachineInstance]
	// forcedPowerOffs holds, by instance UID, the forced power-offs this
	// process has counted and announced, so each is reported once.
	forcedPowerOffs base.Assumed[types.UID, struct{}]
	// placing serialises placements: the count of a host's free slots and
	// the placement it allows are one critical section, which no single
	// object's resourceVersion guards (a host's slots are a count over many
	// machines), so it is a lock of its own, not a record of the cache's lag.
	placing sync.Mutex
	// placed holds, by machine UID, the placements on MacHosts this
	// operator wrote that its cache may not show yet, so two machines never
	// take one host's last slot. Written and read under placing.
	placed base.Assumed[types.UID, placement]
}

// now is the reconciler's clock's time; the real time without one (a
// reconciler built by hand).
func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// patchVMTemplate changes the template of the machine's VM, a VM the
// operator made before (under an older operator or another transport),
// guarded by its resourceVersion. KubeVirt uses the change from the VM's
// next start, and nothing is restarted for it. A conflict (KubeVirt writes
// the VM's status often) is tried again by the next reconcile; a refusal
// is said in an event on the machine, in the API server's words. The error
// is returned for the caller to weigh.
func (r *Reconciler) patchVMTemplate(ctx context.Context, o *machineObservation, what string,
	change func(*kubevirtv1.VirtualMachine)) error {
	vm := o.VM.DeepCopy()
	patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(vm)
	if err := r.Patch(ctx, vm, patch); err != nil {
		if !apierrors.IsConflict(err) {
			base.RecordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Provision", fmt.Sprintf(
				"giving VirtualMachine %s/%s %s: %v", vm.Namespace, vm.Name, what, err))
		}
		ctrl.LoggerFrom(ctx).Info("VirtualMachine's template not updated; trying again later", "virtualMachine", vm.Name,
			"change", what, "reason", err.Error())
		return err
	}
	o.VM = vm
	ctrl.LoggerFrom(ctx).Info("VirtualMachine's template updated (from its next start)", "virtualMachine", vm.Name, "change", what)
	return nil
}

// readExisting reads, uncached, an object the API server says exists
// although the cache did not show it: whether the machine controls it
// decides what happens next, never its name.
func (r *Reconciler) readExisting(ctx context.Context, rendered, into client.Object) error {
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rendered), into); err != nil {
		return fmt.Errorf("reading %T %s/%s, which already exists: %w", into, rendered.GetNamespace(), rendered.GetName(), err)
	}
	return nil
}

// createFailed records a create the API server refused (a quota, KubeVirt's
// or CDI's admission, a webhook that is down) on the observation, so the
// status shows it in the API server's words, and as a Warning event; the
// error is returned for backoff. The next successful reconcile clears it.
func (r *Reconciler) createFailed(o *machineObservation, err error) error {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err
	}
	o.WriteFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonCreateFailed, Message: err.Error()}
	base.RecordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Provision", err.Error())
	return err
}

// updateFailed records an update of the machine itself that the API server
// refused (an admission webhook or policy, a webhook that is down) like a
// refused create; a conflict is only a stale read, retried silently.
func (r *Reconciler) updateFailed(o *machineObservation, err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return err
	}
	o.WriteFailed = &base.Problem{Reason: macvirtv1alpha1.ReasonUpdateFailed, Message: err.Error()}
	base.RecordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Provision", err.Error())
	return err
}

// placement is where this operator placed a machine: the machine, and the
// MacHost it is placed on.
type placement struct {
	key  types.NamespacedName
	host string
}
