package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
)

// Specs must not see each other's objects. envtest runs no namespace
// controller and no garbage collector, so a deleted namespace keeps what is
// in it, and every later operator would list, reconcile and (for a VM that
// still wants to run) schedule it: a spec under load then waits behind the
// work of the specs before it, or finds their VMs on its nodes. So what
// each spec made goes with it, after everything else of the spec has run
// (its own graceful deletions, the lifting of its faults, its operator's
// stop): the pools that fill its namespaces, then the claims, machines,
// VMs, instances, DataVolumes, Services, EndpointSlices, NetworkPolicies
// and Secrets in them are deleted and their finalizers cleared, as an
// admin clears a namespace whose controllers are gone, and the classes it
// made go with their snapshots. The spec fails if they do not go.

// specObjects are the namespaces and classes the running spec made.
var specObjects struct {
	mu         sync.Mutex
	namespaces []string
	classes    []string
}

func trackNamespace(ns string) {
	specObjects.mu.Lock()
	defer specObjects.mu.Unlock()
	specObjects.namespaces = append(specObjects.namespaces, ns)
}

func trackClass(name string) {
	specObjects.mu.Lock()
	defer specObjects.mu.Unlock()
	specObjects.classes = append(specObjects.classes, name)
}

// sweepTimeout bounds the sweep.
const sweepTimeout = 30 * time.Second

// sweptKinds are the namespaced kinds a spec's objects are of, in the order
// they are deleted.
var sweptKinds = []client.ObjectList{
	&macvirtv1alpha1.MacClaimList{}, &macvirtv1alpha1.MacMachineList{}, &kubevirtv1.VirtualMachineList{},
	&kubevirtv1.VirtualMachineInstanceList{}, &cdiv1.DataVolumeList{}, &corev1.ServiceList{}, &discoveryv1.EndpointSliceList{},
	&networkingv1.NetworkPolicyList{}, &corev1.SecretList{},
}

// sweepSpec deletes what the spec made and waits until it is gone.
func sweepSpec() {
	specObjects.mu.Lock()
	namespaces, classes := specObjects.namespaces, specObjects.classes
	specObjects.namespaces, specObjects.classes = nil, nil
	specObjects.mu.Unlock()
	ctx := context.Background()
	in := map[string]bool{}
	for _, ns := range namespaces {
		in[ns] = true
	}
	Eventually(func(g Gomega) {
		// Pools first: a pool replaces the machines deleted under it.
		var pools macvirtv1alpha1.MacPoolList
		g.Expect(k8sClient.List(ctx, &pools)).To(Succeed())
		for i := range pools.Items {
			if in[pools.Items[i].Spec.Namespace] {
				g.Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &pools.Items[i]))).To(Succeed())
			}
		}
		var left []string
		for _, ns := range namespaces {
			for _, list := range sweptKinds {
				l := list.DeepCopyObject().(client.ObjectList)
				g.Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
				items, err := meta.ExtractList(l)
				g.Expect(err).NotTo(HaveOccurred())
				for _, o := range items {
					obj := o.(client.Object)
					left = append(left, fmt.Sprintf("%T %s/%s", obj, ns, obj.GetName()))
					if obj.GetDeletionTimestamp().IsZero() {
						g.Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed())
					}
					if len(obj.GetFinalizers()) > 0 {
						g.Expect(client.IgnoreNotFound(k8sClient.Patch(ctx, obj,
							client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))).To(Succeed())
					}
				}
			}
		}
		g.Expect(left).To(BeEmpty(), "what the spec made is not gone yet")
	}).WithTimeout(sweepTimeout).Should(Succeed())
	for _, name := range classes {
		class := &macvirtv1alpha1.MacClass{}
		class.Name = name
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, class))).To(Succeed())
		Expect(k8sClient.DeleteAllOf(ctx, &appsv1.ControllerRevision{}, client.InNamespace(operatorNamespace),
			client.MatchingLabels{macvirtv1alpha1.LabelClass: classhistory.ClassLabel(name)})).To(Succeed())
	}
}
