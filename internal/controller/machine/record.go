package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/smbios"
)

// ensureFinalizer answers: will the machine's deletion wait for a graceful
// stop? Nothing is created before it does; a refused patch shows in status.
func (r *Reconciler) ensureFinalizer(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if controllerutil.ContainsFinalizer(m, macvirtv1alpha1.MachineFinalizer) {
		return true, nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.AddFinalizer(m, macvirtv1alpha1.MachineFinalizer)
	if err := r.Patch(ctx, m, patch); err != nil {
		controllerutil.RemoveFinalizer(m, macvirtv1alpha1.MachineFinalizer)
		return false, r.updateFailed(o, fmt.Errorf("adding finalizer %s: %w", macvirtv1alpha1.MachineFinalizer, err))
	}
	return true, nil
}

// ensureIdentity answers: does the machine have its SMBIOS identity and
// class revision? Both are written once, in one update that carries the
// resourceVersion, so two reconciles can never give a machine two identities.
func (r *Reconciler) ensureIdentity(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if m.Spec.SMBIOS != nil && m.Spec.ClassRevision != "" {
		return true, nil
	}
	if m.Spec.SMBIOS == nil {
		// The admission webhook normally generated it; this covers machines
		// admitted while the webhook was unavailable.
		id, err := smbios.NewUnique(ctx, r.Client, o.Class.Spec.EffectiveHardware().SMBIOS.ProductName)
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

// removeFinalizer lets the machine go.
func (r *Reconciler) removeFinalizer(ctx context.Context, m *macvirtv1alpha1.MacMachine) error {
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.RemoveFinalizer(m, macvirtv1alpha1.MachineFinalizer)
	if err := r.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}
