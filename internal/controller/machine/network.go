package machine

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// exposureOf is what a machine's NetworkPolicy lets in: nothing while it
// is unbound (or its claim is gone); its claim's namespace once bound, and
// anything when the claim's Service reaches it from outside the cluster;
// and the operator's tunnel (tunnel: its pods; nil without one) once bound.
// Both the machine's reconcile and its exposure controller decide it here.
func exposureOf(ctx context.Context, c client.Reader, class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine,
	tunnel *networkingv1.NetworkPolicyPeer) (render.Exposure, error) {
	ref := m.Spec.ClaimRef
	if ref == nil {
		return render.Exposure{}, nil
	}
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return render.Exposure{}, nil
		}
		return render.Exposure{}, fmt.Errorf("getting claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if claim.UID != ref.UID {
		return render.Exposure{}, nil
	}
	access, _ := tenancy.Access(class, claim.Spec.Access.Type)
	return render.Exposure{ClaimNamespace: ref.Namespace, External: access != macvirtv1alpha1.AccessClusterIP, Tunnel: tunnel}, nil
}

// ensureNetworkPolicy answers: does the machine have its NetworkPolicy? It
// is created before the VM, so the launcher pod is never without it, letting
// in what the binding allows. Keeping it in step with the binding later is
// the exposure controller's (exposure.go), one writer of every change, which
// a binding reaches without waiting for this reconcile's other steps. One
// of its name the machine does not control is left alone, and the machine
// says so (NotOwned), creating nothing more.
func (r *Reconciler) ensureNetworkPolicy(ctx context.Context, o *machineObservation) (bool, error) {
	ex, err := exposureOf(ctx, r.Client, o.Class, o.Machine, r.Tunnel)
	if err != nil {
		return false, err
	}
	want := render.NetworkPolicy(o.Class, o.Machine, ex)
	have := &networkingv1.NetworkPolicy{}
	err = r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		// Not in the cache, which holds only machines' own: create it, and
		// learn from the API server whether one of that name exists.
		err = r.Create(ctx, want)
		switch {
		case err == nil:
			ctrl.LoggerFrom(ctx).Info("created the machine's NetworkPolicy", "ingressFrom", ex.ClaimNamespace, "external", ex.External)
			return true, nil
		case apierrors.IsAlreadyExists(err):
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
				return false, fmt.Errorf("reading NetworkPolicy %s: %w", want.Name, err)
			}
		default:
			return false, r.createFailed(o, fmt.Errorf("creating NetworkPolicy %s/%s: %w", want.Namespace, want.Name, err))
		}
	} else if err != nil {
		return false, fmt.Errorf("getting NetworkPolicy %s: %w", want.Name, err)
	}
	if !metav1.IsControlledBy(have, o.Machine) {
		o.Foreign = append(o.Foreign, describeForeign("NetworkPolicy", have))
		ctrl.LoggerFrom(ctx).Info("a NetworkPolicy of the machine's name is not the machine's; leaving it alone", "networkPolicy", have.Name)
		return false, nil
	}
	return true, nil
}
