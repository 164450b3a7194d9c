package machine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// loadClass answers: what does the machine render and observe from? The
// live class while it has the revision the machine records (or the machine
// records none yet); otherwise the snapshot of the recorded revision, so a
// class deleted or changed under a machine does not change it. Without
// that snapshot (a revision older than snapshots) a changed class is used
// as it is, saying so; with neither class nor snapshot the machine waits.
func (r *Reconciler) loadClass(ctx context.Context, o *machineObservation) (bool, error) {
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
		o.ClassProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonClassNotFound, Message: fmt.Sprintf(
			"MacClass %q was deleted; the machine keeps its revision %s, kept by the operator", name, rev)}
	case res.Kept:
		o.ClassProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonClassChanged, Message: fmt.Sprintf(
			"MacClass %q is at revision %s; the machine keeps its revision %s, kept by the operator (a pool replaces its idle machines)",
			name, res.LiveRevision, rev)}
	case rev != "" && res.LiveRevision != rev:
		o.ClassProblem = &base.Problem{Reason: macvirtv1alpha1.ReasonClassChanged, Message: fmt.Sprintf(
			"MacClass %q is at revision %s and revision %s, the machine's, was not kept; the machine is observed, and would be re-rendered, with the class as it is now",
			name, res.LiveRevision, rev)}
	}
	return true, nil
}

// ensureClassKept answers: is the class revision the machine records kept?
// The class controller keeps each revision it sees, but one it did not get
// to before the class changed again (it was busy, or the changes came
// fast) would leave machines of that revision nothing to fall back on. So
// a machine whose class still has its revision keeps it too. A failure is
// logged and tried again on the next reconcile: the machine does not wait
// for it.
func (r *Reconciler) ensureClassKept(ctx context.Context, o *machineObservation) (bool, error) {
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
