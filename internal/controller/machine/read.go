package machine

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
)

// observeDiskSources reads the DataSource of each DataVolume CDI has not
// reported on yet: CDI gives a clone whose DataSource does not resolve no
// status at all, so only the DataSource can say why.
func (r *Reconciler) observeDiskSources(ctx context.Context, o *machineObservation) error {
	o.DiskSources = nil
	for _, dv := range o.DataVolumes {
		if dv == nil || dv.Status.Phase != cdiv1.PhaseUnset || dv.Spec.SourceRef == nil ||
			dv.Spec.SourceRef.Kind != cdiv1.DataVolumeDataSource {
			continue
		}
		key := types.NamespacedName{Namespace: dv.Namespace, Name: dv.Spec.SourceRef.Name}
		if ns := dv.Spec.SourceRef.Namespace; ns != nil && *ns != "" {
			key.Namespace = *ns
		}
		ds := &cdiv1.DataSource{}
		if err := base.GetOptional(ctx, r.Client, key, ds); err != nil {
			return err
		}
		src := &diskSource{Key: key, Found: ds.Name != ""}
		for i := range ds.Status.Conditions {
			if ds.Status.Conditions[i].Type == cdiv1.DataSourceReady {
				src.Ready = &ds.Status.Conditions[i]
			}
		}
		if o.DiskSources == nil {
			o.DiskSources = map[string]*diskSource{}
		}
		o.DiskSources[dv.Name] = src
	}
	return nil
}

// readObjects reads the machine's DataVolumes, VM and VMI through c, nil
// for what does not exist, and keeps only those the machine controls. The
// instance is read before the VM: KubeVirt creates it after the VM, so an
// uncached read that finds an instance also finds its VM.
func readObjects(ctx context.Context, c client.Reader, o *machineObservation) error {
	m := o.Machine
	o.Foreign, o.strayInstance = nil, false
	o.DataVolumes = make([]*cdiv1.DataVolume, 0, 3)
	for _, name := range render.DataVolumeNames(o.Class, m) {
		dv := &cdiv1.DataVolume{}
		if err := base.GetOptional(ctx, c, types.NamespacedName{Namespace: m.Namespace, Name: name}, dv); err != nil {
			return err
		}
		if dv.Name == "" {
			dv = nil
		}
		o.DataVolumes = append(o.DataVolumes, dv)
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: render.VirtualMachineName(m)}
	vm, vmi := &kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}
	if err := base.GetOptional(ctx, c, key, vmi); err != nil {
		return err
	}
	if err := base.GetOptional(ctx, c, key, vm); err != nil {
		return err
	}
	o.VM, o.VMI = vm, vmi
	if vm.Name == "" {
		o.VM = nil
	}
	if vmi.Name == "" {
		o.VMI = nil
	}
	o.keepOwned()
	return nil
}

// observeOwned reads the machine's objects from the cache and, when some
// are not the machine's, again from the API server: a cache that has not
// caught up (an instance seen before its VM, an object already deleted)
// must not make the machine report, or leave alone, what is its own.
func (r *Reconciler) observeOwned(ctx context.Context, o *machineObservation) error {
	killed := o.Killed
	if err := readObjects(ctx, r.Client, o); err != nil || len(o.Foreign) == 0 || r.APIReader == nil {
		return err
	}
	o.Killed = killed
	return readObjects(ctx, r.APIReader, o)
}

// observeObjects reads the machine's DataVolumes, VM and VMI, keeping only
// those the machine controls. Anything else under their names is never
// written: the chain stops, and the status names it (ReasonNotOwned).
func (r *Reconciler) observeObjects(ctx context.Context, o *machineObservation) (bool, error) {
	if err := r.observeOwned(ctx, o); err != nil {
		return false, err
	}
	o.Observed = true
	if len(o.Foreign) > 0 {
		ctrl.LoggerFrom(ctx).Info("objects under the machine's names are not the machine's; leaving them alone", "notOwned", o.Foreign)
		return false, nil
	}
	if err := r.observeDiskSources(ctx, o); err != nil {
		return false, err
	}
	return true, nil
}
