package simulator

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The garbage collector (Options.GarbageCollector). An API server alone
// deletes no dependents: kube-controller-manager's garbage collector
// deletes an object once none of its owners exists any more (an owner
// reference whose UID no object of that kind, name and namespace has;
// pkg/controller/garbagecollector, attemptToDeleteItem). The sandbox runs
// no kube-controller-manager, so without this a deleted claim's Service,
// EndpointSlice and connection Secret stayed, and a new claim of the same
// name found them in its way. The stand-in sweeps the kinds macvirt makes
// dependents of every GCInterval, in the background propagation policy
// (dependents of the deleted go on the next sweep); an owner whose kind
// the API server does not serve is never judged absent.

// gcKinds are the dependents' kinds the stand-in collects.
var gcKinds = []client.ObjectList{
	&corev1.ServiceList{}, &discoveryv1.EndpointSliceList{}, &corev1.SecretList{}, &networkingv1.NetworkPolicyList{},
	&kubevirtv1.VirtualMachineList{}, &cdiv1.DataVolumeList{},
}

// GCInterval is how often the garbage collector stand-in sweeps.
const GCInterval = time.Second

type garbageCollector struct {
	sim    *Simulator
	mapper meta.RESTMapper
}

func (g garbageCollector) Start(ctx context.Context) error {
	tick := time.NewTicker(GCInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			g.sweep(ctx)
		}
	}
}

func (g garbageCollector) NeedLeaderElection() bool { return false }

// sweep deletes every object of gcKinds whose owners are all gone.
func (g garbageCollector) sweep(ctx context.Context) {
	log := ctrl.Log.WithName("sim-gc")
	for _, kind := range gcKinds {
		list := kind.DeepCopyObject().(client.ObjectList)
		if err := g.sim.reader.List(ctx, list); err != nil {
			continue
		}
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			obj, ok := o.(client.Object)
			if !ok || len(obj.GetOwnerReferences()) == 0 || !obj.GetDeletionTimestamp().IsZero() {
				return nil
			}
			if g.anyOwnerExists(ctx, obj) {
				return nil
			}
			err := g.sim.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())},
				client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err == nil {
				log.V(1).Info("deleted an object whose owners are gone", "kind", obj.GetObjectKind().GroupVersionKind().Kind,
					"object", client.ObjectKeyFromObject(obj))
			}
			return nil
		})
	}
}

// anyOwnerExists reports whether one of obj's owners exists with the UID
// the reference names; true when it cannot tell.
func (g garbageCollector) anyOwnerExists(ctx context.Context, obj client.Object) bool {
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return true
		}
		gvk := gv.WithKind(ref.Kind)
		mapping, err := g.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return true
		}
		owner := &unstructured.Unstructured{}
		owner.SetGroupVersionKind(gvk)
		key := types.NamespacedName{Name: ref.Name}
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			key.Namespace = obj.GetNamespace()
		}
		err = g.sim.reader.Get(ctx, key, owner)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return true
		case owner.GetUID() == ref.UID:
			return true
		}
	}
	return false
}
