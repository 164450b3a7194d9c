// Package index names the operator's cache indexes and registers them: the
// fields the watches map events through and the steps look objects up by,
// and the keys they hold. Register runs once per manager, before the
// controllers are set up.
package index

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/state"
	"github.com/macvirt/macvirt/internal/smbios"
)

// The indexed fields.
const (
	// MachineClass indexes MacMachines by spec.className, so a class change
	// reaches its machines.
	MachineClass = "spec.className"
	// MachineBindable holds BindableKeys: "class/<name>" and "pool/<name>"
	// for every idle pool machine a claim may take.
	MachineBindable = "macvirt.io/bindable"
	// MachineClaimUID holds spec.claimRef.uid, so a claim finds the machine
	// it won even before its own status records it.
	MachineClaimUID = "spec.claimRef.uid"
	// MachineRetainedFor holds RetainedKey for every machine released or
	// bound under Retain (each one will be left behind), so a namespace's
	// retained machines of a class are counted.
	MachineRetainedFor = "macvirt.io/retained-for"
	// InstanceNode indexes VirtualMachineInstances by the node they run on.
	InstanceNode = "status.nodeName"
	// PoolClass indexes MacPools by spec.className.
	PoolClass = "spec.className"
	// ClassDataSource indexes MacClasses by the DataSources they clone
	// from ("<namespace>/<name>").
	ClassDataSource = "macvirt.io/datasource"
	// MachineHost indexes MacMachines by spec.hostName, the MacHost a
	// Virtualization machine is placed on.
	MachineHost = "spec.hostName"
	// ClaimWaitingFor indexes the MacClaims that wait for a machine by the
	// BindKey they wait on.
	ClaimWaitingFor = "macvirt.io/waiting-for"
)

// Register adds every cache index the controllers look objects up by.
func Register(ctx context.Context, idx client.FieldIndexer) error {
	for _, i := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&macvirtv1alpha1.MacMachine{}, MachineClass, func(o client.Object) []string {
			return []string{o.(*macvirtv1alpha1.MacMachine).Spec.ClassName}
		}},
		{&macvirtv1alpha1.MacMachine{}, MachineBindable, func(o client.Object) []string {
			return BindableKeys(o.(*macvirtv1alpha1.MacMachine))
		}},
		{&macvirtv1alpha1.MacMachine{}, MachineClaimUID, func(o client.Object) []string {
			if ref := o.(*macvirtv1alpha1.MacMachine).Spec.ClaimRef; ref != nil {
				return []string{string(ref.UID)}
			}
			return nil
		}},
		{&macvirtv1alpha1.MacMachine{}, MachineHost, func(o client.Object) []string {
			if h := o.(*macvirtv1alpha1.MacMachine).Spec.HostName; h != "" {
				return []string{h}
			}
			return nil
		}},
		{&macvirtv1alpha1.MacMachine{}, smbios.Field, smbios.IndexValues},
		{&macvirtv1alpha1.MacMachine{}, MachineRetainedFor, func(o client.Object) []string {
			m := o.(*macvirtv1alpha1.MacMachine)
			if ref := m.Spec.ClaimRef; ref != nil && state.Retains(m) && m.DeletionTimestamp.IsZero() {
				return []string{RetainedKey(ref.Namespace, m.Spec.ClassName)}
			}
			return nil
		}},
		{&kubevirtv1.VirtualMachineInstance{}, InstanceNode, func(o client.Object) []string {
			if node := o.(*kubevirtv1.VirtualMachineInstance).Status.NodeName; node != "" {
				return []string{node}
			}
			return nil
		}},
		{&macvirtv1alpha1.MacPool{}, PoolClass, func(o client.Object) []string {
			return []string{o.(*macvirtv1alpha1.MacPool).Spec.ClassName}
		}},
		{&macvirtv1alpha1.MacClass{}, ClassDataSource, func(o client.Object) []string {
			var keys []string
			for _, ref := range state.DataSourceRefs(o.(*macvirtv1alpha1.MacClass)) {
				keys = append(keys, ref.String())
			}
			return keys
		}},
		{&macvirtv1alpha1.MacClaim{}, ClaimWaitingFor, func(o client.Object) []string {
			c := o.(*macvirtv1alpha1.MacClaim)
			if !state.ClaimWaiting(c) {
				return nil
			}
			return []string{BindKey(c)}
		}},
	} {
		if err := idx.IndexField(ctx, i.obj, i.field, i.fn); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", i.obj, i.field, err)
		}
	}
	return nil
}

// RetainedKey is the MachineRetainedFor value of a namespace's released
// machines of a class.
func RetainedKey(namespace, class string) string { return namespace + "/" + class }

// BindableKeys indexes a machine that a claim may bind now: a pool's
// (labelled for it and controlled by it), unbound, never released, not
// being deleted, and Ready (running, or suspended: a binding resumes it;
// not while its host agent saves its memory, whatever the phase says yet). Whether the pool really made it (its UID, its
// namespace) is checked against the pool when a claim takes it
// (tenancy.PoolHolds).
func BindableKeys(m *macvirtv1alpha1.MacMachine) []string {
	pool := m.Labels[macvirtv1alpha1.LabelPool]
	owner := metav1.GetControllerOfNoCopy(m)
	if pool == "" || owner == nil || owner.Kind != "MacPool" || owner.Name != pool || owner.APIVersion != macvirtv1alpha1.GroupVersion.String() ||
		m.Spec.ClaimRef != nil || m.Labels[macvirtv1alpha1.LabelReleased] != "" ||
		!m.DeletionTimestamp.IsZero() || (m.Status.Phase != macvirtv1alpha1.MachineReady && m.Status.Phase != macvirtv1alpha1.MachineSuspended) || !state.MachineReady(m) ||
		(m.Status.Host != nil && m.Status.Host.State == macvirtv1alpha1.HostVMSuspending) {
		return nil
	}
	return []string{"class/" + m.Spec.ClassName, "pool/" + pool}
}

// BindKey is the MachineBindable key a claim looks up.
func BindKey(claim *macvirtv1alpha1.MacClaim) string {
	if claim.Spec.PoolName != "" {
		return "pool/" + claim.Spec.PoolName
	}
	return "class/" + claim.Spec.ClassName
}
