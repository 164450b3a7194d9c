package machine

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/smbios"
)

// ensureFinalizer answers: will the machine's deletion wait for a graceful
// stop? Nothing is created before it does; a refused patch shows in status.
func (r *Reconciler) ensureFinalizer(ctx context.Context, o *machineObservation) (bool, error) {
	if _, err := base.EnsureFinalizer(ctx, r.Client, o.Machine, macvirtv1alpha1.MachineFinalizer); err != nil {
		return false, r.updateFailed(o, err)
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
