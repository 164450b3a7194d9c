package pool

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/controller/slots"
	"github.com/macvirt/macvirt/internal/render"
)

// loadPoolClass answers: does the pool's class exist? Without it the pool
// plans nothing but still counts its machines.
func (r *Reconciler) loadPoolClass(ctx context.Context, s *poolScope) (bool, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Pool.Spec.ClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("getting MacClass %s: %w", s.Pool.Spec.ClassName, err)
		}
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonClassNotFound,
			Message: fmt.Sprintf("MacClass %q does not exist; the pool creates no machines until it does", s.Pool.Spec.ClassName)}
		return true, nil
	}
	s.Class = class
	return true, nil
}

// listPoolMachines answers: what machines does the pool have, and what
// should change? The plan is pure (planPool).
func (r *Reconciler) listPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.InNamespace(s.Pool.Spec.Namespace),
		client.MatchingLabels{macvirtv1alpha1.LabelPool: s.Pool.Name}); err != nil {
		return false, fmt.Errorf("listing machines of pool %s: %w", s.Pool.Name, err)
	}
	s.Machines = s.Machines[:0]
	for i := range list.Items {
		m := &list.Items[i]
		if owner := metav1.GetControllerOfNoCopy(m); owner != nil && owner.UID != s.Pool.UID && m.Spec.ClaimRef == nil &&
			m.Labels[macvirtv1alpha1.LabelReleased] == "" {
			// Unbound, and controlled by something else (an earlier pool of
			// this name, not yet collected): not this pool's to count.
			continue
		}
		s.Machines = append(s.Machines, *m)
	}
	s.Plan = planPool(poolInputFor(s.Pool, s.Class, s.Machines, r.Clock.Now()))
	return true, nil
}

// adoptPoolMachines answers: does the pool control every unbound machine it
// counts? One labelled for it in its namespace, unbound and controlled by
// nothing (the garbage collector orphaned it when an earlier pool of this
// name was deleted with --cascade=orphan) is adopted, as a ReplicaSet adopts
// its orphans: claims bind only machines their pool controls. The patch
// carries the machine's resourceVersion; a refused one shows in status.
func (r *Reconciler) adoptPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var errs []error
	for i := range s.Machines {
		m := &s.Machines[i]
		if m.Spec.ClaimRef != nil || m.Labels[macvirtv1alpha1.LabelReleased] != "" || !m.DeletionTimestamp.IsZero() ||
			metav1.GetControllerOfNoCopy(m) != nil {
			continue
		}
		adopted := m.DeepCopy()
		adopted.OwnerReferences = append(adopted.OwnerReferences, base.ControllerRef("MacPool", s.Pool.Name, s.Pool.UID))
		err := r.Patch(ctx, adopted, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("adopted an orphaned pool machine", "machine", m.Name)
			*m = *adopted
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or changed (bound, perhaps): the next reconcile sees it.
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonUpdateFailed, "adopting", m.Name, err))
		}
	}
	return true, errors.Join(errs...)
}

// deletePoolMachines deletes as planned. Deletes carry the machine's
// resourceVersion, so a machine a claim bound meanwhile is never deleted.
// A refused delete is recorded and returned (backoff); the others still go.
func (r *Reconciler) deletePoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	byName := map[string]*macvirtv1alpha1.MacMachine{}
	for i := range s.Machines {
		byName[s.Machines[i].Name] = &s.Machines[i]
	}
	var errs []error
	for _, name := range s.Plan.Delete {
		m := byName[name]
		rv, uid := m.ResourceVersion, m.UID
		err := r.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("deleted pool machine", "machine", name)
			metrics.PoolMachineOps.WithLabelValues("delete").Inc()
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or changed (bound, recovered): the next
			// reconcile sees it as it is now.
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonDeleteFailed, "deleting", name, err))
		}
	}
	return true, errors.Join(errs...)
}

// ensurePoolNamespace creates the pool's namespace when machines are to be
// made and it is missing, as the install would (macvirt never deletes it).
// One it cannot create is said on the pool, naming the API server's answer.
func (r *Reconciler) ensurePoolNamespace(ctx context.Context, s *poolScope) (bool, error) {
	if len(s.Plan.Create) == 0 {
		return true, nil
	}
	ns := s.Pool.Spec.Namespace
	err := r.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	if !apierrors.IsNotFound(err) {
		return true, err
	}
	created, err := base.CreateNamespace(ctx, r.Client, ns, "MacPool "+s.Pool.Name)
	if err != nil {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonNamespaceMissing,
			Message: fmt.Sprintf("namespace %q of the pool's machines does not exist, and the operator could not create it (%v); create it or change spec.namespace", ns, err)}
		return false, nil
	}
	if created {
		ctrl.LoggerFrom(ctx).Info("created the pool's namespace", "namespace", ns)
		base.RecordEvent(r.Recorder, s.Pool, corev1.EventTypeNormal, "NamespaceCreated", "Create",
			fmt.Sprintf("created namespace %s for the pool's machines (macvirt never deletes it)", ns))
	}
	return true, nil
}

// createPoolMachines creates as planned, in deterministic slots, so the
// cap holds across stale caches and two operators.
func (r *Reconciler) createPoolMachines(ctx context.Context, s *poolScope) (bool, error) {
	var errs []error
	for _, name := range s.Plan.Create {
		err := r.Create(ctx, newPoolMachine(s.Pool, s.Class, name))
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created pool machine", "machine", name)
			metrics.PoolMachineOps.WithLabelValues("create").Inc()
		case apierrors.IsAlreadyExists(err):
			// Another reconcile (or operator) took the slot: the cap holds.
		case apierrors.IsNotFound(err):
			// The namespace is missing (ensurePoolNamespace could not
			// make it, or it is being deleted): its creation wakes the pool.
			s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonNamespaceMissing,
				Message: fmt.Sprintf("namespace %q of the pool's machines does not exist; create it or change spec.namespace", s.Pool.Spec.Namespace)}
			return false, nil
		default:
			errs = append(errs, r.writeFailed(s, macvirtv1alpha1.ReasonCreateFailed, "creating", name, err))
		}
	}
	return true, errors.Join(errs...)
}

// newPoolMachine is a pool's machine in a given slot. The pool owns it
// until it is bound; binding removes the owner reference so deleting the
// pool never deletes a tenant's machine.
func newPoolMachine(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, name string) *macvirtv1alpha1.MacMachine {
	return &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       pool.Spec.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name},
			OwnerReferences: []metav1.OwnerReference{base.ControllerRef("MacPool", pool.Name, pool.UID)},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: render.ClassRevision(class),
			SuspendWhenIdle: suspendsIdle(pool, class)},
	}
}

// observeSlots answers: do machines of the pool wait for a macOS slot, and
// how full is each Apple node? Nodes and instances are read only then.
func (r *Reconciler) observeSlots(ctx context.Context, s *poolScope) (bool, error) {
	waiting := waitingForSlots(s.Machines)
	if waiting == 0 {
		return true, nil
	}
	// The report is information: a failed read says so in it, and the
	// pool goes on with its creates and deletes.
	use, err := slots.ReadUse(ctx, r.Client)
	s.Slots = slotsProblem(waiting, use, err)
	return true, nil
}
