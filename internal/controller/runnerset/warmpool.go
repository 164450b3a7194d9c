package runnerset

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// ensureWarmPool keeps the set's own pool at the planned idle target,
// where the set's namespace may claim its class.
func (r *Reconciler) ensureWarmPool(ctx context.Context, s *setScope) (bool, error) {
	if !ownsPool(s.Set) {
		return true, nil
	}
	pool := &macvirtv1alpha1.MacPool{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: ownedPoolName(s.Set)}, pool); err != nil {
		return false, err
	}
	want := ownedPool(s.Set, s.Plan.WarmIdle)
	if pool.Name == "" {
		if p, err := r.mayClaim(ctx, s); p != nil || err != nil {
			s.Blocked = p
			return false, err
		}
		if err := r.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("creating the warm pool %s: %v", want.Name, err))
			return false, fmt.Errorf("creating MacPool %s: %w", want.Name, err)
		}
		s.Pool = want
		return true, nil
	}
	if pool.Labels[macvirtv1alpha1.LabelRunnerSetNamespace] != s.Set.Namespace || pool.Labels[macvirtv1alpha1.LabelRunnerSet] != s.Set.Name {
		s.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable,
			Message: fmt.Sprintf("MacPool %s exists and is not this set's warm pool; rename the set or remove the pool", pool.Name)}
		return false, nil
	}
	s.Pool = pool
	if equality.Semantic.DeepEqual(pool.Spec.Idle, want.Spec.Idle) && equality.Semantic.DeepEqual(pool.Spec.MaxMachines, want.Spec.MaxMachines) &&
		pool.Spec.ClassName == want.Spec.ClassName {
		return true, nil
	}
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Spec.Idle, pool.Spec.MaxMachines, pool.Spec.ClassName = want.Spec.Idle, want.Spec.MaxMachines, want.Spec.ClassName
	if err := r.Patch(ctx, pool, patch); err != nil {
		s.fail(macvirtv1alpha1.ReasonClassUnavailable, fmt.Sprintf("moving the warm pool's idle target to %d: %v", *want.Spec.Idle, err))
		return false, fmt.Errorf("patching MacPool %s: %w", pool.Name, err)
	}
	return true, nil
}

// mayClaim refuses a warm pool of a class the set's namespace may not
// claim: owning a pool must not give the set more than its namespace has.
func (r *Reconciler) mayClaim(ctx context.Context, s *setScope) (*base.Problem, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Set.Spec.ClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable,
				Message: fmt.Sprintf("spec.className: MacClass %q does not exist", s.Set.Spec.ClassName)}, nil
		}
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: s.Set.Namespace}, ns); err != nil {
		return nil, err
	}
	if refusal := tenancy.Check(class, s.Set.Namespace, ns.Labels, macvirtv1alpha1.ReclaimDelete); refusal != nil {
		return &base.Problem{Reason: macvirtv1alpha1.ReasonClassUnavailable, Message: "spec.className: " + refusal.Message}, nil
	}
	return nil, nil
}
