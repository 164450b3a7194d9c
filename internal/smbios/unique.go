package smbios

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Field is the cache index of MacMachines by every value of their SMBIOS
// identity (serial, board serial, UUID in upper case), so a new identity is
// checked against the whole fleet without listing it.
const Field = "macvirt.io/smbios"

// IndexValues is the indexer of Field.
func IndexValues(o client.Object) []string {
	m, ok := o.(*macvirtv1alpha1.MacMachine)
	if !ok || m.Spec.SMBIOS == nil {
		return nil
	}
	return values(*m.Spec.SMBIOS)
}

func values(id macvirtv1alpha1.MachineSMBIOS) []string {
	var out []string
	for _, v := range []string{id.SerialNumber, id.BoardSerial, strings.ToUpper(id.UUID)} {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Users maps each value of id that another machine than self already uses
// to that machine's namespace/name. r must have the Field index.
func Users(ctx context.Context, r client.Reader, id macvirtv1alpha1.MachineSMBIOS, self types.NamespacedName) (map[string]string, error) {
	users := map[string]string{}
	for _, v := range values(id) {
		var list macvirtv1alpha1.MacMachineList
		if err := r.List(ctx, &list, client.MatchingFields{Field: v}); err != nil {
			return nil, fmt.Errorf("looking up machines with SMBIOS value %s: %w", v, err)
		}
		for _, m := range list.Items {
			if m.Namespace != self.Namespace || m.Name != self.Name {
				users[v] = m.Namespace + "/" + m.Name
				if v == strings.ToUpper(id.UUID) {
					users[id.UUID] = users[v]
				}
			}
		}
	}
	return users, nil
}

// uniqueAttempts bounds the draws of NewUnique. A serial is drawn from
// SerialSpace (tens of millions per product), so a second draw is rare.
const uniqueAttempts = 8

// NewUnique draws identities until one shares no value with a machine r
// knows (r must have the Field index).
func NewUnique(ctx context.Context, r client.Reader, productName string) (macvirtv1alpha1.MachineSMBIOS, error) {
	for range uniqueAttempts {
		id, err := New(productName, nil)
		if err != nil {
			return id, err
		}
		users, err := Users(ctx, r, id, types.NamespacedName{})
		if err != nil {
			return id, err
		}
		if len(users) == 0 {
			return id, nil
		}
	}
	return macvirtv1alpha1.MachineSMBIOS{}, fmt.Errorf("no unused SMBIOS identity in %d draws; set spec.smbios by hand", uniqueAttempts)
}
