package main

import (
	"context"
	"sync"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// writeCounter counts the operator's writes (each request it makes, those
// that fail included, as each costs the API server a request): all of
// them, and, per claim, those made for it up to and including the one
// that bound it (the machine's spec.claimRef naming it) and up to and
// including the one that recorded it Ready (its status, Ready=True).
type writeCounter struct {
	total atomic.Int64

	mu sync.Mutex
	// paths is each claim's writes, by "namespace/name".
	paths map[string]*claimPath
	// machineClaim is the claim each machine was bound to by a write seen
	// here, by the machine's "namespace/name": a machine's NetworkPolicy
	// is written for the claim its machine is bound to.
	machineClaim map[string]string
}

// claimPath is the writes made for one claim.
type claimPath struct {
	toBound, toReady int
	bound, ready     bool
}

// opReport is what the operator's process says of its writes over a
// window: all of them, and the mean writes on a claim's path to bound
// (the machine's claimRef) and to Ready, over the claims that got there
// (the tenant's create not included).
type opReport struct {
	Writes  int64   `json:"writes"`
	ToBound float64 `json:"toBound"`
	ToReady float64 `json:"toReady"`
	Bound   int     `json:"bound"`
	Ready   int     `json:"ready"`
}

func (w *writeCounter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total.Store(0)
	w.paths, w.machineClaim = map[string]*claimPath{}, map[string]string{}
}

// count records one write of obj, as it is after the request, and whether
// the request failed: a machine written with a claimRef ends its claim's
// path to bound, a claim's status written Ready its path to Ready.
func (w *writeCounter) count(obj client.Object, err error) {
	w.total.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paths == nil {
		return
	}
	key := w.claimOf(obj)
	if key == "" {
		return
	}
	p := w.paths[key]
	if p == nil {
		p = &claimPath{}
		w.paths[key] = p
	}
	if !p.bound {
		p.toBound++
	}
	if !p.ready {
		p.toReady++
	}
	if err != nil {
		return
	}
	switch o := obj.(type) {
	case *macvirtv1alpha1.MacMachine:
		p.bound = true
		w.machineClaim[o.Namespace+"/"+o.Name] = key
	case *macvirtv1alpha1.MacClaim:
		if meta.IsStatusConditionTrue(o.Status.Conditions, macvirtv1alpha1.ConditionReady) {
			p.bound, p.ready = true, true
		}
	}
}

// binding notes, before its request, the claim a machine write binds the
// machine to: the exposure controller, which sees the binding in its
// watch, may write the machine's NetworkPolicy before the binding's
// request has returned here. undo takes the note back when the request
// failed.
func (w *writeCounter) binding(obj client.Object) (undo func()) {
	m, ok := obj.(*macvirtv1alpha1.MacMachine)
	if !ok || m.Spec.ClaimRef == nil {
		return func() {}
	}
	machine, claim := m.Namespace+"/"+m.Name, m.Spec.ClaimRef.Namespace+"/"+m.Spec.ClaimRef.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.machineClaim == nil {
		return func() {}
	}
	prev, had := w.machineClaim[machine]
	w.machineClaim[machine] = claim
	notes := w.machineClaim
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if notes[machine] != claim {
			return // another write's note since
		}
		if had {
			notes[machine] = prev
		} else {
			delete(notes, machine)
		}
	}
}

// report sums up the writes since reset.
func (w *writeCounter) report() opReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := opReport{Writes: w.total.Load()}
	var toBound, toReady int
	for _, p := range w.paths {
		if p.bound {
			r.Bound++
			toBound += p.toBound
		}
		if p.ready {
			r.Ready++
			toReady += p.toReady
		}
	}
	if r.Bound > 0 {
		r.ToBound = float64(toBound) / float64(r.Bound)
	}
	if r.Ready > 0 {
		r.ToReady = float64(toReady) / float64(r.Ready)
	}
	return r
}

// claimOf names the claim a write is for: the claim itself, the machine
// bound to it, the NetworkPolicy of that machine, or an object the claim
// controls; empty for any other. Called with w.mu held.
func (w *writeCounter) claimOf(obj client.Object) string {
	switch o := obj.(type) {
	case *macvirtv1alpha1.MacClaim:
		return o.Namespace + "/" + o.Name
	case *macvirtv1alpha1.MacMachine:
		if ref := o.Spec.ClaimRef; ref != nil {
			return ref.Namespace + "/" + ref.Name
		}
		return ""
	case *networkingv1.NetworkPolicy:
		if owner := metav1.GetControllerOfNoCopy(o); owner != nil && owner.Kind == "MacMachine" {
			return w.machineClaim[o.Namespace+"/"+owner.Name]
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
	return c.write(obj, func() error { return c.Client.Create(ctx, obj, opts...) })
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.write(obj, func() error { return c.Client.Update(ctx, obj, opts...) })
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.write(obj, func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

// write makes and counts a write that may bind a machine.
func (c *countingClient) write(obj client.Object, do func() error) error {
	undo := c.writes.binding(obj)
	err := do()
	if err != nil {
		undo()
	}
	c.writes.count(obj, err)
	return err
}

func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	err := c.Client.Delete(ctx, obj, opts...)
	c.writes.count(obj, err)
	return err
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
	err := s.SubResourceWriter.Update(ctx, obj, opts...)
	s.writes.count(obj, err)
	return err
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	s.writes.count(obj, err)
	return err
}
