package operator

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// notifyWatches tells the agent endpoint's held watches of every change
// the cache sees of a machine, and of a claim, for the machine it names
// (its keys, its binding, its bootstrap): the agent then takes its new
// desired state within a round trip rather than an interval.
func notifyWatches(ctx context.Context, c cache.Cache, changed func(types.NamespacedName)) error {
	machines, err := c.GetInformer(ctx, &macvirtv1alpha1.MacMachine{})
	if err != nil {
		return fmt.Errorf("watching machines for the agents' watches: %w", err)
	}
	onMachine := func(obj any) {
		if m, ok := unwrap(obj).(*macvirtv1alpha1.MacMachine); ok {
			changed(types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
		}
	}
	if _, err := machines.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onMachine,
		UpdateFunc: func(_, obj any) { onMachine(obj) }, DeleteFunc: onMachine}); err != nil {
		return err
	}
	claims, err := c.GetInformer(ctx, &macvirtv1alpha1.MacClaim{})
	if err != nil {
		return fmt.Errorf("watching claims for the agents' watches: %w", err)
	}
	onClaim := func(obj any) {
		if cl, ok := unwrap(obj).(*macvirtv1alpha1.MacClaim); ok && cl.Status.MachineRef != nil {
			changed(types.NamespacedName{Namespace: cl.Status.MachineRef.Namespace, Name: cl.Status.MachineRef.Name})
		}
	}
	_, err = claims.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onClaim,
		UpdateFunc: func(old, obj any) { onClaim(old); onClaim(obj) }, DeleteFunc: onClaim})
	return err
}

// unwrap is the object of a delete whose final state the informer missed.
func unwrap(obj any) any {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}
