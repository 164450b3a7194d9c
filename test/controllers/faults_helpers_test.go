package controllers_test

import (
	"context"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// faultyClient wraps the operator's client: every conflictEvery-th machine
// update fails with a 409 without being applied, machine lists omit the
// machines this client created during the last staleLists lists, and after
// crashAfter writes every further write fails (the "process died" point).
type faultyClient struct {
	client.Client
	conflictEvery int64
	staleLists    int64
	crashAfter    int64
	// scope, when set, limits the writes crashAfter counts to the objects
	// it accepts, so objects other specs left behind cannot move the
	// crash point.
	scope func(client.Object) bool

	updates, lists, writes atomic.Int64
	// machineDeletes counts, per namespace, the MacMachine deletes sent
	// to the API server.
	machineDeletes sync.Map // namespace -> *atomic.Int64
	crashed        chan struct{}
	crashOnce      sync.Once

	mu      sync.Mutex
	created map[string]int64 // machine key -> list count at creation
}

func newFaultyClient(c client.Client) *faultyClient {
	return &faultyClient{Client: c, crashed: make(chan struct{}), created: map[string]int64{}}
}

// deletesIn is how many MacMachine deletes in ns were sent.
func (f *faultyClient) deletesIn(ns string) int64 {
	if n, ok := f.machineDeletes.Load(ns); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

var errCrashed = apierrors.NewServiceUnavailable("simulated operator crash")

// write counts a write of obj and reports whether the process has "crashed".
func (f *faultyClient) write(obj client.Object) bool {
	select {
	case <-f.crashed:
		return true
	default:
	}
	if f.scope != nil && !f.scope(obj) {
		return false
	}
	n := f.writes.Add(1)
	if f.crashAfter > 0 && n > f.crashAfter {
		f.crashOnce.Do(func() { close(f.crashed) })
		return true
	}
	return false
}

func (f *faultyClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if f.write(obj) {
		return errCrashed
	}
	err := f.Client.Create(ctx, obj, opts...)
	if _, ok := obj.(*macvirtv1alpha1.MacMachine); ok && err == nil {
		f.mu.Lock()
		f.created[obj.GetNamespace()+"/"+obj.GetName()] = f.lists.Load()
		f.mu.Unlock()
	}
	return err
}

func (f *faultyClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if f.write(obj) {
		return errCrashed
	}
	if _, ok := obj.(*macvirtv1alpha1.MacMachine); ok && f.conflictEvery > 0 && f.updates.Add(1)%f.conflictEvery == 0 {
		return apierrors.NewConflict(schema.GroupResource{Group: "macvirt.io", Resource: "macmachines"}, obj.GetName(),
			errString("injected conflict"))
	}
	return f.Client.Update(ctx, obj, opts...)
}

func (f *faultyClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if f.write(obj) {
		return errCrashed
	}
	return f.Client.Patch(ctx, obj, patch, opts...)
}

func (f *faultyClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if f.write(obj) {
		return errCrashed
	}
	if _, ok := obj.(*macvirtv1alpha1.MacMachine); ok {
		n, _ := f.machineDeletes.LoadOrStore(obj.GetNamespace(), &atomic.Int64{})
		n.(*atomic.Int64).Add(1)
	}
	return f.Client.Delete(ctx, obj, opts...)
}

func (f *faultyClient) Status() client.SubResourceWriter {
	return &faultyStatus{SubResourceWriter: f.Client.Status(), f: f}
}

func (f *faultyClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	n := f.lists.Add(1)
	if err := f.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	ml, ok := list.(*macvirtv1alpha1.MacMachineList)
	if !ok || f.staleLists == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := ml.Items[:0]
	for _, m := range ml.Items {
		if at, recent := f.created[m.Namespace+"/"+m.Name]; recent && n-at <= f.staleLists {
			continue
		}
		kept = append(kept, m)
	}
	ml.Items = kept
	return nil
}

type faultyStatus struct {
	client.SubResourceWriter
	f *faultyClient
}

func (s *faultyStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if s.f.write(obj) {
		return errCrashed
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (s *faultyStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if s.f.write(obj) {
		return errCrashed
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

type errString string

func (e errString) Error() string { return string(e) }
