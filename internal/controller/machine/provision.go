package machine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
)

// renderMachine renders the machine's objects once per reconcile, and only
// when something is missing, resolving the AppleSMC key. A problem a human
// must fix is recorded as Blocked, not returned.
func (r *Reconciler) renderMachine(ctx context.Context, o *machineObservation) (*kubevirtv1.VirtualMachine, []cdiv1.DataVolume, bool) {
	if o.rendered != nil {
		return o.rendered.vm, o.rendered.dataVolumes, true
	}
	if o.Blocked != nil {
		return nil, nil, false
	}
	if img := o.Class.EffectiveImage(); o.Class.ImageUnresolved() || (img.Source == nil && img.SourceRef == nil) {
		o.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForImage,
			Message: fmt.Sprintf("MacClass %s refreshes its image from a registry and the first import is not done yet; "+
				"kubectl get macclass %s shows the import, and the machine is provisioned once it is", o.Class.Name, o.Class.Name)}
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
		o.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonInvalidClass,
			Message: fmt.Sprintf("cannot render MacClass %s: %v", o.Class.Name, err)}
		return nil, nil, false
	}
	o.rendered = &renderedObjects{vm: vm, dataVolumes: dvs}
	return vm, dvs, true
}

func (r *Reconciler) readOSK(ctx context.Context, ref *macvirtv1alpha1.SecretKeyRef) (string, *base.Problem) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		return "", &base.Problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable, Message: fmt.Sprintf(
			"cannot read the AppleSMC OSK Secret %s (the operator needs get on it, granted by default only in its own namespace): %v", key, err)}
	}
	osk, ok := secret.Data[ref.Key]
	if !ok || len(osk) == 0 {
		return "", &base.Problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable,
			Message: fmt.Sprintf("Secret %s has no key %q holding the AppleSMC OSK", key, ref.Key)}
	}
	if !isAppleOSK(osk) {
		// Said without the value: whatever the key holds stays in the Secret.
		return "", &base.Problem{Reason: macvirtv1alpha1.ReasonSecretUnavailable, Message: fmt.Sprintf(
			"key %q of Secret %s does not hold the AppleSMC OSK (the 64-character string every Mac's SMC answers with, the same on all Macs); "+
				"the operator copies nothing else from a Secret into a VM: put the OSK there, or use smc.mode VirtualSMC", ref.Key, key)}
	}
	return string(osk), nil
}

// appleOSKDigest is the SHA-256 of the OSK every Apple SMC answers with.
// The OSK reaches the VM template (read by the domain hook, and by anyone
// who may read the VM) and QEMU's command line, so the operator copies a
// Secret's value there only when it is that string: a class naming any
// other Secret key cannot make the operator copy it where tenants read.
const appleOSKDigest = "5c0caad0974db5850bfcff8f1ce4839216cac63eea42e33f0b332bbf26f9c443"

// isAppleOSK reports whether value is the OSK.
func isAppleOSK(value []byte) bool {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:]) == appleOSKDigest
}

// ensureDataVolumes answers: do the machine's DataVolumes exist? A Failed
// machine gets nothing new.
func (r *Reconciler) ensureDataVolumes(ctx context.Context, o *machineObservation) (bool, error) {
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
		if p, err := r.cloneSourceProblem(ctx, &dvs[i]); err != nil || p != nil {
			o.Blocked = p
			if p != nil && p.Reason == macvirtv1alpha1.ReasonWaitingForDiskSource {
				// Nothing the machine watches tells it the DataSource came.
				o.BlockedRecheck = diskSourceRecheck
			}
			return false, err
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

// ensureVirtualMachine answers: does the VM exist? It is created once, as
// rendered; KubeVirt itself waits for the DataVolumes. A class change does
// not touch an existing VM: pools replace machines of an old revision.
func (r *Reconciler) ensureVirtualMachine(ctx context.Context, o *machineObservation) (bool, error) {
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

// diskSourceRecheck is how often a machine whose DataSource does not exist
// looks for it again.
const diskSourceRecheck = 10 * time.Second

// cloneSourceProblem answers what keeps a DataVolume cloned from a
// DataSource from being created, or nil. CDI's webhook refuses a
// DataVolume whose DataSource does not exist, so the machine waits for it
// and says so. CDI follows a DataSource to the PVC or snapshot it names and
// authorises the clone for whoever creates the DataVolume, here the
// operator, which may clone from anywhere; a class's author was asked
// about the DataSource's namespace only (admission), so a DataSource naming
// a disk elsewhere would clone what they may not.
func (r *Reconciler) cloneSourceProblem(ctx context.Context, dv *cdiv1.DataVolume) (*base.Problem, error) {
	ref := dv.Spec.SourceRef
	if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
		return nil, nil
	}
	ns := dv.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = *ref.Namespace
	}
	ds := &cdiv1.DataSource{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, ds); err != nil {
		if apierrors.IsNotFound(err) {
			return &base.Problem{Reason: macvirtv1alpha1.ReasonWaitingForDiskSource, Message: fmt.Sprintf(
				"DataSource %s/%s does not exist, and CDI refuses a DataVolume (%s) that clones from a missing DataSource; "+
					"create it, or fix the class's sourceRef", ns, ref.Name, dv.Name)}, nil
		}
		return nil, fmt.Errorf("reading DataSource %s/%s: %w", ns, ref.Name, err)
	}
	kind, at := "", ""
	switch src := ds.Spec.Source; {
	case src.PVC != nil:
		kind, at = "PVC", src.PVC.Namespace
	case src.Snapshot != nil:
		kind, at = "VolumeSnapshot", src.Snapshot.Namespace
	case src.DataSource != nil:
		kind, at = "DataSource", src.DataSource.Namespace
	default:
		return nil, nil
	}
	if at == "" || at == ns {
		if kind == "DataSource" {
			return &base.Problem{Reason: macvirtv1alpha1.ReasonInvalidClass, Message: fmt.Sprintf(
				"DataSource %s/%s names another DataSource; the operator clones only from a DataSource that names its PVC or VolumeSnapshot", ns, ref.Name)}, nil
		}
		return nil, nil
	}
	return &base.Problem{Reason: macvirtv1alpha1.ReasonInvalidClass, Message: fmt.Sprintf(
		"DataSource %s/%s names %s %s/..., outside its own namespace; the operator clones only from the namespace a class names "+
			"(whose author may clone there), so keep the DataSource's disk in namespace %s", ns, ref.Name, kind, at, ns)}, nil
}
