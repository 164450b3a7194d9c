package operator

import (
	"context"
	"fmt"
	"net/http"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// CacheOptions is how the operator's manager caches: Services and
// EndpointSlices only when they carry macvirt.io/claim (each claim's own),
// NetworkPolicies only when they carry macvirt.io/machine (each machine's
// own), not every one of the cluster. A manager made without them works, caching
// all of them.
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(macvirtv1alpha1.LabelClaim, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	sel := labels.NewSelector().Add(*req)
	machineReq, err := labels.NewRequirement(macvirtv1alpha1.LabelMachine, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Service{}:             {Label: sel},
		&discoveryv1.EndpointSlice{}:  {Label: sel},
		&networkingv1.NetworkPolicy{}: {Label: labels.NewSelector().Add(*machineReq)},
	}}
}

// snapshotCache is a cache of the class snapshots in the operator's
// namespace, started with the manager's caches. Machines of a deleted or
// changed class read their snapshot on every reconcile and every heartbeat;
// the manager's own cache cannot hold them, as it watches cluster-wide and
// the operator may read controllerrevisions in its own namespace only.
func snapshotCache(mgr ctrl.Manager, namespace string) (client.Reader, error) {
	tracked, err := labels.NewRequirement(macvirtv1alpha1.LabelClassRevision, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("selecting class snapshots: %w", err)
	}
	c, err := cluster.New(mgr.GetConfig(), func(o *cluster.Options) {
		o.Scheme = mgr.GetScheme()
		o.HTTPClient = mgr.GetHTTPClient()
		o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mgr.GetRESTMapper(), nil }
		o.Cache = cache.Options{
			DefaultNamespaces:           map[string]cache.Config{namespace: {}},
			DefaultLabelSelector:        labels.NewSelector().Add(*tracked),
			ReaderFailOnMissingInformer: true,
		}
	})
	if err != nil {
		return nil, fmt.Errorf("creating the class snapshot cache: %w", err)
	}
	// Registered now, so the manager waits for it to sync before it starts
	// the controllers, instead of a reconcile waiting on its first read.
	if _, err := c.GetCache().GetInformer(context.Background(), &appsv1.ControllerRevision{}); err != nil {
		return nil, fmt.Errorf("watching class snapshots: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the class snapshot cache: %w", err)
	}
	return c.GetCache(), nil
}
