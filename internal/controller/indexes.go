package controller

import (
	"context"
	"fmt"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/identity"
)

// RegisterIndexes adds every cache index the controllers look objects up by.
// Call it once per manager, before setting up the controllers.
func RegisterIndexes(ctx context.Context, idx client.FieldIndexer) error {
	for _, i := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&macvirtv1alpha1.MacMachine{}, classNameField, func(o client.Object) []string {
			return []string{o.(*macvirtv1alpha1.MacMachine).Spec.ClassName}
		}},
		{&macvirtv1alpha1.MacMachine{}, bindableField, func(o client.Object) []string {
			return bindableKeys(o.(*macvirtv1alpha1.MacMachine))
		}},
		{&macvirtv1alpha1.MacMachine{}, claimUIDField, func(o client.Object) []string {
			if ref := o.(*macvirtv1alpha1.MacMachine).Spec.ClaimRef; ref != nil {
				return []string{string(ref.UID)}
			}
			return nil
		}},
		{&macvirtv1alpha1.MacMachine{}, identity.Field, identity.IndexValues},
		{&macvirtv1alpha1.MacMachine{}, releasedField, func(o client.Object) []string {
			m := o.(*macvirtv1alpha1.MacMachine)
			if ref := m.Spec.ClaimRef; ref != nil && retains(m) && m.DeletionTimestamp.IsZero() {
				return []string{releasedKey(ref.Namespace, m.Spec.ClassName)}
			}
			return nil
		}},
		{&kubevirtv1.VirtualMachineInstance{}, vmiNodeField, func(o client.Object) []string {
			if node := o.(*kubevirtv1.VirtualMachineInstance).Status.NodeName; node != "" {
				return []string{node}
			}
			return nil
		}},
		{&macvirtv1alpha1.MacPool{}, poolClassField, func(o client.Object) []string {
			return []string{o.(*macvirtv1alpha1.MacPool).Spec.ClassName}
		}},
		{&macvirtv1alpha1.MacClass{}, classDataSourceField, func(o client.Object) []string {
			var keys []string
			for _, ref := range dataSourceRefs(o.(*macvirtv1alpha1.MacClass)) {
				keys = append(keys, ref.String())
			}
			return keys
		}},
		{&macvirtv1alpha1.MacClaim{}, claimWaitingField, func(o client.Object) []string {
			c := o.(*macvirtv1alpha1.MacClaim)
			if !claimWaiting(c) {
				return nil
			}
			return []string{bindKey(c)}
		}},
	} {
		if err := idx.IndexField(ctx, i.obj, i.field, i.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.obj, i.field, err)
		}
	}
	return nil
}
