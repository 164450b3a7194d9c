package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/identity"
	"github.com/macvirt/macvirt/internal/render"
)

// defaultGracePeriodSeconds is used to stop a VM whose template carries no
// grace period (one not created by macvirt).
const defaultGracePeriodSeconds = 300

// loadClass answers: what does the machine render and observe from? The
// live class while it has the revision the machine records (or the machine
// records none yet); otherwise the snapshot of the recorded revision, so a
// class deleted or changed under a machine does not change it. Without
// that snapshot (a revision older than snapshots) a changed class is used
// as it is, saying so; with neither class nor snapshot the machine waits.
func (r *MacMachineReconciler) loadClass(ctx context.Context, o *machineObservation) (bool, error) {
	res, err := r.Classes.Resolve(ctx, o.Machine)
	if err != nil {
		return false, err
	}
	if res.Class == nil {
		// GitOps may apply the class later; its creation triggers a reconcile.
		return false, nil
	}
	o.Class = res.Class
	name, rev := o.Machine.Spec.ClassName, o.Machine.Spec.ClassRevision
	switch {
	case res.Live == nil:
		o.ClassProblem = &problem{macvirtv1alpha1.ReasonClassNotFound, fmt.Sprintf(
			"MacClass %q was deleted; the machine keeps its revision %s, kept by the operator", name, rev)}
	case res.Kept:
		o.ClassProblem = &problem{macvirtv1alpha1.ReasonClassChanged, fmt.Sprintf(
			"MacClass %q is at revision %s; the machine keeps its revision %s, kept by the operator (a pool replaces its idle machines)",
			name, res.LiveRevision, rev)}
	case rev != "" && res.LiveRevision != rev:
		o.ClassProblem = &problem{macvirtv1alpha1.ReasonClassChanged, fmt.Sprintf(
			"MacClass %q is at revision %s and revision %s, the machine's, was not kept; the machine is observed, and would be re-rendered, with the class as it is now",
			name, res.LiveRevision, rev)}
	}
	return true, nil
}

// ensureIdentity answers: does the machine have its SMBIOS identity and
// class revision? Both are written once, in one update that carries the
// resourceVersion, so two reconciles can never give a machine two identities.
func (r *MacMachineReconciler) ensureIdentity(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if m.Spec.SMBIOS != nil && m.Spec.ClassRevision != "" {
		return true, nil
	}
	if m.Spec.SMBIOS == nil {
		// The admission webhook normally generated it; this covers machines
		// admitted while the webhook was unavailable.
		id, err := identity.NewUnique(ctx, r.Client, o.Class.Spec.EffectiveHardware().SMBIOS.ProductName)
		if err != nil {
			return false, err
		}
		m.Spec.SMBIOS = &id
	}
	if m.Spec.ClassRevision == "" {
		m.Spec.ClassRevision = render.ClassRevision(o.Class)
	}
	if err := r.Update(ctx, m); err != nil {
		return false, r.updateFailed(o, fmt.Errorf("recording SMBIOS identity and class revision: %w", err))
	}
	ctrl.LoggerFrom(ctx).Info("recorded machine identity", "serial", m.Spec.SMBIOS.SerialNumber, "classRevision", m.Spec.ClassRevision)
	return true, nil
}

// ensureClassKept answers: is the class revision the machine records kept?
// The class controller keeps each revision it sees, but one it did not get
// to before the class changed again (it was busy, or the changes came
// fast) would leave machines of that revision nothing to fall back on. So
// a machine whose class still has its revision keeps it too. A failure is
// logged and tried again on the next reconcile: the machine does not wait
// for it.
func (r *MacMachineReconciler) ensureClassKept(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if o.ClassProblem != nil || r.Classes.Snapshots == nil || m.Spec.ClassRevision == "" {
		return true, nil
	}
	log := ctrl.LoggerFrom(ctx)
	kept, err := r.Classes.Kept(ctx, m.Spec.ClassName, m.Spec.ClassRevision)
	if err != nil {
		log.Error(err, "checking that the machine's class revision is kept")
		return true, nil
	}
	if kept {
		return true, nil
	}
	snap, err := classhistory.New(r.Classes.Namespace, o.Class, m.Spec.ClassRevision)
	if err == nil {
		err = r.Create(ctx, snap)
	}
	switch {
	case err == nil:
		log.Info("kept the machine's class revision", "revision", m.Spec.ClassRevision, "snapshot", snap.Name)
	case !apierrors.IsAlreadyExists(err):
		log.Error(err, "keeping the machine's class revision", "revision", m.Spec.ClassRevision)
	}
	return true, nil
}

// observeObjects reads the machine's DataVolumes, VM and VMI, keeping only
// those the machine controls. Anything else under their names is never
// written: the chain stops, and the status names it (ReasonNotOwned).
func (r *MacMachineReconciler) observeObjects(ctx context.Context, o *machineObservation) (bool, error) {
	if err := r.observeOwned(ctx, o); err != nil {
		return false, err
	}
	o.Observed = true
	if len(o.Foreign) > 0 {
		ctrl.LoggerFrom(ctx).Info("objects under the machine's names are not the machine's; leaving them alone", "notOwned", o.Foreign)
		return false, nil
	}
	if err := r.observeDiskSources(ctx, o); err != nil {
		return false, err
	}
	return true, nil
}

// getOptional gets an object, leaving it empty when it does not exist.
func getOptional(ctx context.Context, c client.Reader, key types.NamespacedName, obj client.Object) error {
	if err := c.Get(ctx, key, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting %T %s: %w", obj, key, err)
	}
	return nil
}

// renderMachine renders the machine's objects once per reconcile, and only
// when something is missing, resolving the AppleSMC key. A problem a human
// must fix is recorded as Blocked, not returned.
func (r *MacMachineReconciler) renderMachine(ctx context.Context, o *machineObservation) (*kubevirtv1.VirtualMachine, []cdiv1.DataVolume, bool) {
	if o.rendered != nil {
		return o.rendered.vm, o.rendered.dataVolumes, true
	}
	if o.Blocked != nil {
		return nil, nil, false
	}
	opts := r.Render
	smc := o.Class.Spec.Hardware.SMC
	if smc.Mode == macvirtv1alpha1.SMCModeAppleSMC && smc.OSKSecretRef != nil {
		osk, p := r.readOSK(ctx, smc.OSKSecretRef)
		if p != nil {
			o.Blocked = p
			return nil, nil, false
		}
		opts.OSK = osk
	}
	vm, dvs, err := render.VirtualMachine(o.Class, o.Machine, opts)
	if err != nil {
		o.Blocked = &problem{Reason: macvirtv1alpha1.ReasonInvalidClass,
			Message: fmt.Sprintf("cannot render MacClass %s: %v", o.Class.Name, err)}
		return nil, nil, false
	}
	o.rendered = &renderedObjects{vm: vm, dataVolumes: dvs}
	return vm, dvs, true
}

func (r *MacMachineReconciler) readOSK(ctx context.Context, ref *macvirtv1alpha1.SecretKeyRef) (string, *problem) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		return "", &problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable, Message: fmt.Sprintf(
			"cannot read the AppleSMC OSK Secret %s (the operator needs get on it, granted by default only in its own namespace): %v", key, err)}
	}
	osk, ok := secret.Data[ref.Key]
	if !ok || len(osk) == 0 {
		return "", &problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable,
			Message: fmt.Sprintf("Secret %s has no key %q holding the AppleSMC OSK", key, ref.Key)}
	}
	return string(osk), nil
}

// ensureDataVolumes answers: do the machine's DataVolumes exist? A Failed
// machine gets nothing new.
func (r *MacMachineReconciler) ensureDataVolumes(ctx context.Context, o *machineObservation) (bool, error) {
	if _, failed := previousFailure(o.Machine); failed {
		// Nothing new for a Failed machine, but one asked to stop (a
		// released one) still is, gracefully.
		return o.VM != nil && !wantsRunning(o.Machine), nil
	}
	for i := range o.DataVolumes {
		if o.DataVolumes[i] != nil {
			continue
		}
		_, dvs, ok := r.renderMachine(ctx, o)
		if !ok {
			return false, nil
		}
		err := r.Create(ctx, &dvs[i])
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created DataVolume", "dataVolume", dvs[i].Name)
			o.DataVolumes[i] = &dvs[i]
		case apierrors.IsAlreadyExists(err):
			got := &cdiv1.DataVolume{}
			if err := r.readExisting(ctx, &dvs[i], got); err != nil {
				return false, err
			}
			o.DataVolumes[i] = got
			if !o.keepOwned() {
				return false, nil
			}
		default:
			return false, r.createFailed(o, fmt.Errorf("creating DataVolume %s/%s: %w", dvs[i].Namespace, dvs[i].Name, err))
		}
	}
	return true, nil
}

// readExisting reads, uncached, an object the API server says exists
// although the cache did not show it: whether the machine controls it
// decides what happens next, never its name.
func (r *MacMachineReconciler) readExisting(ctx context.Context, rendered, into client.Object) error {
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rendered), into); err != nil {
		return fmt.Errorf("reading %T %s/%s, which already exists: %w", into, rendered.GetNamespace(), rendered.GetName(), err)
	}
	return nil
}

// ensureVirtualMachine answers: does the VM exist? It is created once, as
// rendered; KubeVirt itself waits for the DataVolumes. A class change does
// not touch an existing VM: pools replace machines of an old revision.
func (r *MacMachineReconciler) ensureVirtualMachine(ctx context.Context, o *machineObservation) (bool, error) {
	if o.VM != nil {
		return true, nil
	}
	if r.holdForDomainHook(o) {
		return false, nil
	}
	vm, _, ok := r.renderMachine(ctx, o)
	if !ok {
		return false, nil
	}
	err := r.Create(ctx, vm)
	switch {
	case err == nil:
		ctrl.LoggerFrom(ctx).Info("created VirtualMachine", "virtualMachine", vm.Name)
		o.VM = vm
	case apierrors.IsAlreadyExists(err):
		got := &kubevirtv1.VirtualMachine{}
		if err := r.readExisting(ctx, vm, got); err != nil {
			return false, err
		}
		o.VM = got
		return o.keepOwned(), nil
	default:
		return false, r.createFailed(o, fmt.Errorf("creating VirtualMachine %s/%s: %w", vm.Namespace, vm.Name, err))
	}
	return true, nil
}

// createFailed records a create the API server refused (a quota, KubeVirt's
// or CDI's admission, a webhook that is down) on the observation, so the
// status shows it in the API server's words, and as a Warning event; the
// error is returned for backoff. The next successful reconcile clears it.
func (r *MacMachineReconciler) createFailed(o *machineObservation, err error) error {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err
	}
	o.WriteFailed = &problem{macvirtv1alpha1.ReasonCreateFailed, err.Error()}
	recordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonCreateFailed, "Provision", err.Error())
	return err
}

// updateFailed records an update of the machine itself that the API server
// refused (an admission webhook or policy, a webhook that is down) like a
// refused create; a conflict is only a stale read, retried silently.
func (r *MacMachineReconciler) updateFailed(o *machineObservation, err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return err
	}
	o.WriteFailed = &problem{macvirtv1alpha1.ReasonUpdateFailed, err.Error()}
	recordEvent(r.Recorder, o.Machine, corev1.EventTypeWarning, macvirtv1alpha1.ReasonUpdateFailed, "Provision", err.Error())
	return err
}

// ensureRunState answers: does the VM run as spec.running says? Stopping
// always goes through the stop subresource; starting sets runStrategy back.
func (r *MacMachineReconciler) ensureRunState(ctx context.Context, o *machineObservation) (bool, error) {
	vm := o.VM
	halted := isHalted(vm)
	switch {
	case (!wantsRunning(o.Machine) || observeDrain(*o).Stop) && !halted:
		return false, r.requestStop(ctx, o)
	case wantsRunning(o.Machine) && halted && o.VMI == nil:
		if r.holdForDomainHook(o) {
			return false, nil
		}
		// Guarded by the resourceVersion: a VM replaced since it was read
		// (perhaps by one the machine does not control) is not patched.
		patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		vm.Spec.RunStrategy = render.RunStrategy(o.Machine)
		vm.Spec.Running = nil // cleared so runStrategy alone decides.
		if err := r.Patch(ctx, vm, patch); err != nil {
			return false, fmt.Errorf("starting VirtualMachine %s: %w", vm.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("started VirtualMachine", "virtualMachine", vm.Name)
	}
	return true, nil
}

// requestStop calls the stop subresource with the VM's own grace period.
// A failure is recorded (Stalled) and returned for backoff; nothing else
// happens to the VM.
func (r *MacMachineReconciler) requestStop(ctx context.Context, o *machineObservation) error {
	// The cache may not show a stop this operator requested a moment ago; a
	// second request would be refused by virt-api as a conflict. An uncached
	// read decides.
	fresh := &kubevirtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o.VM), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading VirtualMachine %s before stopping it: %w", o.VM.Name, err)
	}
	freshVMI := &kubevirtv1.VirtualMachineInstance{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(o.VM), freshVMI); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading VirtualMachineInstance %s before stopping it: %w", o.VM.Name, err)
		}
		freshVMI = nil
	}
	// The stop goes by name, so what it would reach is checked first: the
	// VM observed (the machine's) and an instance that VM controls. Anything
	// else is observed, and reported, by the next reconcile.
	if fresh.UID != o.VM.UID {
		return fmt.Errorf("VirtualMachine %s/%s was replaced since it was read; not stopping it", o.VM.Namespace, o.VM.Name)
	}
	if freshVMI != nil && !controlledBy(freshVMI, kindVirtualMachine, fresh.UID) {
		return fmt.Errorf("VirtualMachineInstance %s/%s is not controlled by the machine's VirtualMachine; not stopping it", o.VM.Namespace, o.VM.Name)
	}
	if !stopNeeded(fresh, freshVMI) {
		o.VM = fresh
		return nil
	}
	grace := int64(defaultGracePeriodSeconds)
	if t := o.VM.Spec.Template; t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		grace = *t.Spec.TerminationGracePeriodSeconds
	}
	if err := r.Stopper.Stop(ctx, o.VM.Namespace, o.VM.Name, grace); err != nil {
		o.StopError = err
		return fmt.Errorf("stopping VirtualMachine %s/%s: %w", o.VM.Namespace, o.VM.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("requested graceful stop", "virtualMachine", o.VM.Name, "gracePeriodSeconds", grace)
	return nil
}

// isHalted reports whether the VM is asked not to run, by runStrategy or by
// the deprecated running field.
func isHalted(vm *kubevirtv1.VirtualMachine) bool {
	if vm.Spec.RunStrategy != nil {
		return *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted
	}
	return vm.Spec.Running != nil && !*vm.Spec.Running
}
