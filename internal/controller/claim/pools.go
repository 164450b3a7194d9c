package claim

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// mayServe keeps, of the machines whose claimRef names a claim of the
// namespace, those that can be its own (tenancy.MayServe); any other is
// ignored, loudly.
func (r *Reconciler) mayServe(ctx context.Context, namespace string,
	listed []macvirtv1alpha1.MacMachine) ([]*macvirtv1alpha1.MacMachine, error) {
	pools := poolLookup{}
	out := make([]*macvirtv1alpha1.MacMachine, 0, len(listed))
	for i := range listed {
		m := &listed[i]
		pool, err := pools.get(ctx, r.Client, m.Labels[macvirtv1alpha1.LabelPool])
		if err != nil {
			return nil, err
		}
		if !tenancy.MayServe(m, namespace, pool) {
			ctrl.LoggerFrom(ctx).Info("ignoring a machine that names a claim of the namespace but was made neither there nor by a pool",
				"machine", client.ObjectKeyFromObject(m), "namespace", namespace)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// poolLookup reads pools by name once per reconcile; nil for no name or a
// pool that does not exist.
type poolLookup map[string]*macvirtv1alpha1.MacPool

func (l poolLookup) get(ctx context.Context, c client.Reader, name string) (*macvirtv1alpha1.MacPool, error) {
	if name == "" {
		return nil, nil
	}
	if p, ok := l[name]; ok {
		return p, nil
	}
	p := &macvirtv1alpha1.MacPool{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting MacPool %s: %w", name, err)
		}
		p = nil
	}
	l[name] = p
	return p, nil
}
