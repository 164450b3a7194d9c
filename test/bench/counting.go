package main

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// writeCounter counts the operator's writes: all of them, and, per claim,
// those made for it up to and including the one that recorded it Bound
// (the path to Bound; what follows, the access objects and the connection,
// is on the path to Ready).
type writeCounter struct {
	total atomic.Int64

	mu sync.Mutex
	// toBoundBy is the writes for each claim until it was recorded Bound.
	toBoundBy map[string]int
	bound     map[string]bool
}

func (w *writeCounter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total.Store(0)
	w.toBoundBy, w.bound = map[string]int{}, map[string]bool{}
}

// count records one write of obj, as it is after the request: a claim's
// status written Bound says its path to Bound is over.
func (w *writeCounter) count(obj client.Object) {
	w.total.Add(1)
	key := claimOf(obj)
	if key == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.toBoundBy == nil || w.bound[key] {
		return
	}
	w.toBoundBy[key]++
	if c, ok := obj.(*macvirtv1alpha1.MacClaim); ok && c.Status.MachineRef != nil &&
		meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionBound) {
		w.bound[key] = true
	}
}

// toBound is the mean of the writes made for each of n claims on its way
// to Bound.
func (w *writeCounter) toBound(n int) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	sum := 0
	for key, v := range w.toBoundBy {
		if w.bound[key] {
			sum += v
		}
	}
	return float64(sum) / float64(n)
}

// claimOf names the claim a write is for: the claim itself, the machine
// bound to it, or an object it controls; empty for any other.
func claimOf(obj client.Object) string {
	switch o := obj.(type) {
	case *macvirtv1alpha1.MacClaim:
		return o.Namespace + "/" + o.Name
	case *macvirtv1alpha1.MacMachine:
		if ref := o.Spec.ClaimRef; ref != nil {
			return ref.Namespace + "/" + ref.Name
		}
		return ""
	}
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == "MacClaim" {
			return obj.GetNamespace() + "/" + ref.Name
		}
	}
	return ""
}

// countingClient counts every write the operator makes.
type countingClient struct {
	client.Client
	writes *writeCounter
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	defer c.writes.count(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	defer c.writes.count(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	defer c.writes.count(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	defer c.writes.count(obj)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.writes.total.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), writes: c.writes}
}

type countingStatus struct {
	client.SubResourceWriter
	writes *writeCounter
}

func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	defer s.writes.count(obj)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	defer s.writes.count(obj)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
