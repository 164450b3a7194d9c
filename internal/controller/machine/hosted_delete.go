package machine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// reconcileDeleteHosted deletes a Virtualization machine the APFS way: its
// host agent stops macOS gracefully and deletes the VM, and says so
// (status.host.state Deleted); only then does the finalizer go. A machine
// whose host is lost lets go at once: its VM stays on the Mac, stopped by
// the Mac's loss, and the host agent, once back, stops it gracefully if it
// runs and removes it, since no machine is placed there any more.
func (r *Reconciler) reconcileDeleteHosted(ctx context.Context, o *machineObservation) (ctrl.Result, error) {
	m := o.Machine
	if _, err := r.observeHost(ctx, o); err != nil {
		return ctrl.Result{}, err
	}
	lost := hostLost(*o)
	switch {
	case lost != "":
		base.RecordEvent(r.Recorder, m, corev1.EventTypeWarning, macvirtv1alpha1.ReasonHostLost, "Delete", fmt.Sprintf(
			"%s: the machine's VM stays on that Mac until its host agent returns, which then stops it gracefully and removes it", lost))
	case m.Status.Host == nil || m.Status.Host.State != macvirtv1alpha1.HostVMDeleted:
		o.DeletionStep = fmt.Sprintf("waiting for the host agent on MacHost %s to shut macOS down gracefully and delete the VM", m.Spec.HostName)
		if hv := m.Status.Host; hv != nil && hv.Error != "" {
			o.DeletionStep += ": " + hv.Error
		}
		return ctrl.Result{}, nil
	}
	if _, err := base.RemoveFinalizer(ctx, r.Client, m, macvirtv1alpha1.MachineFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("machine deleted after its host agent removed the VM", "host", m.Spec.HostName, "hostLost", lost != "")
	o.DeletionStep = "done"
	return ctrl.Result{}, nil
}
