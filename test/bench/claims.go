package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/internal/render"
)

// maxPoolIdle is the most idle machines a MacPool may ask for.
const maxPoolIdle = 1000

// benchClaims binds n claims over n Ready idle machines with the claim
// controller alone and measures each claim from its create call to the
// first watch event showing it bound.
func benchClaims(ctx context.Context, cfg *rest.Config, c client.Client, n int) (result, error) {
	class, err := benchClass(ctx, c)
	if err != nil {
		return result{}, err
	}
	poolNS, claimNS := "bench-pool", "bench-claims"
	for _, ns := range []string{poolNS, claimNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return result{}, err
		}
	}
	// A pool holds at most maxPoolIdle idle machines (the CRD's limit):
	// larger sizes spread machines and claims over several pools.
	pools := make([]*macvirtv1alpha1.MacPool, (n+maxPoolIdle-1)/maxPoolIdle)
	for k := range pools {
		size := int32(min(maxPoolIdle, n-k*maxPoolIdle)) //nolint:gosec // at most maxPoolIdle.
		pools[k] = &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", k)},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class.Name, Namespace: poolNS, Idle: &size, MaxMachines: &size, Paused: true}}
		if err := c.Create(ctx, pools[k]); err != nil {
			return result{}, err
		}
	}
	if err := parallel(n, func(i int) error {
		return readyMachine(ctx, c, class, pools[i/maxPoolIdle], fmt.Sprintf("bench-%d", i))
	}); err != nil {
		return result{}, err
	}

	writes := &atomic.Int64{}
	mgr, err := managerFor(cfg)
	if err != nil {
		return result{}, err
	}
	if err := operator.Setup(mgr, operator.Options{NameSuffix: fmt.Sprintf("-%d", n), Controllers: []operator.Controller{operator.ClaimController}, ClaimWorkers: benchWorkers,
		WrapClient: func(inner client.Client) client.Client { return &countingClient{Client: inner, writes: writes} }}); err != nil {
		return result{}, err
	}
	stop, err := startManager(ctx, mgr)
	if err != nil {
		return result{}, err
	}
	defer stop()
	return measure(ctx, cfg, n, &macvirtv1alpha1.MacClaimList{}, claimNS,
		func(i int) client.Object {
			return &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i), Namespace: claimNS},
				Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pools[i%len(pools)].Name}}
		},
		func(o runtime.Object) (string, bool) {
			cl, ok := o.(*macvirtv1alpha1.MacClaim)
			// A claim whose status names a machine may only have reserved
			// it; bound is when the machine's side is recorded too.
			return cl.GetName(), ok && cl.Status.MachineRef != nil &&
				meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionBound)
		}, c, writes)
}

// measure creates n objects at once and times each until bound says so.
func measure(ctx context.Context, cfg *rest.Config, n int, list client.ObjectList, ns string,
	build func(int) client.Object, bound func(runtime.Object) (string, bool), c client.Client, writes *atomic.Int64) (result, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return result{}, err
	}
	var mu sync.Mutex
	started := map[string]time.Time{}
	done := map[string]time.Time{}
	all := make(chan struct{})
	record := func(o runtime.Object) {
		name, ok := bound(o)
		mu.Lock()
		defer mu.Unlock()
		if _, seen := done[name]; ok && !seen && len(done) < n {
			done[name] = time.Now()
			if len(done) == n {
				close(all)
			}
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	first, err := wc.Watch(wctx, list, client.InNamespace(ns))
	if err != nil {
		return result{}, err
	}
	// A watch the API server closes (a slow reader under load) is replaced
	// after a relist, so no binding goes unseen.
	go followWatch(wctx, wc, first, list, ns, record)
	writes.Store(0)
	before, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	cpuBefore := processCPU()
	begin := time.Now()
	if err := parallel(n, func(i int) error {
		obj := build(i)
		mu.Lock()
		started[obj.GetName()] = time.Now()
		mu.Unlock()
		return c.Create(ctx, obj)
	}); err != nil {
		return result{}, err
	}
	created := time.Since(begin)
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		return result{}, fmt.Errorf("only %d of %d bound after 2 minutes", len(done), n)
	}
	// Work a binder does after the last bind (events, a last status)
	// belongs to this side too.
	time.Sleep(settle)
	after, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	r := result{writes: writes.Load(), created: created, server: after.minus(before), processCPU: processCPU() - cpuBefore}
	var last time.Time
	for name, at := range done {
		r.latencies = append(r.latencies, at.Sub(started[name]))
		if at.After(last) {
			last = at
		}
	}
	r.elapsed = last.Sub(begin)
	return r, nil
}

// settle is how long a side's server load is still counted after its last
// bind.
const settle = time.Second

// followWatch feeds every event to record, relisting and watching again
// whenever the watch ends, until ctx is done.
func followWatch(ctx context.Context, wc client.WithWatch, w watch.Interface, list client.ObjectList, ns string, record func(runtime.Object)) {
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				record(ev.Object)
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return
		}
		fresh := list.DeepCopyObject().(client.ObjectList)
		if err := wc.List(ctx, fresh, client.InNamespace(ns)); err == nil {
			_ = meta.EachListItem(fresh, func(o runtime.Object) error { record(o); return nil })
		}
		var err error
		if w, err = wc.Watch(ctx, list, client.InNamespace(ns)); err != nil {
			return
		}
	}
}

func benchClass(ctx context.Context, c client.Client) (*macvirtv1alpha1.MacClass, error) {
	ns := "macvirt-images"
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: macvirtv1alpha1.MacClassSpec{
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{
				SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "sonoma"}}},
			Bootloader: macvirtv1alpha1.BootloaderSpec{DiskSource: macvirtv1alpha1.DiskSource{
				SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &ns, Name: "opencore"}}},
		}}
	return class, c.Create(ctx, class)
}

// readyMachine creates a pool machine, controlled by the pool as the pool
// controller makes them, and marks it Ready, as the machine controller
// would once its guest answered.
func readyMachine(ctx context.Context, c client.Client, class *macvirtv1alpha1.MacClass, pool *macvirtv1alpha1.MacPool, name string) error {
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Spec.Namespace,
			Labels:          map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, macvirtv1alpha1.GroupVersion.WithKind("MacPool"))}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: render.ClassRevision(class)},
	}
	if err := c.Create(ctx, m); err != nil {
		return err
	}
	m.Status.Phase = macvirtv1alpha1.MachineReady
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady,
		Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "ready"})
	return c.Status().Update(ctx, m)
}

// countingClient counts every write the operator makes.
type countingClient struct {
	client.Client
	writes *atomic.Int64
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes.Add(1)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes.Add(1)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.writes.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.writes.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), writes: c.writes}
}

type countingStatus struct {
	client.SubResourceWriter
	writes *atomic.Int64
}

func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// startManager starts mgr and waits for its caches and for the informers
// its controllers watch; stop ends it and waits until it has returned, so
// nothing is still syncing when the API server goes away (which
// controller-runtime reports as errors with stack traces).
func startManager(ctx context.Context, mgr ctrl.Manager) (stop func(), err error) {
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: the manager stopped with:", err)
			}
		case <-time.After(time.Minute):
			fmt.Fprintln(os.Stderr, "bench: the manager did not stop within a minute")
		}
	}
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		stop()
		return nil, fmt.Errorf("cache did not sync")
	}
	// The controllers ask for their informers as they start, after the
	// first sync: wait until no informer is missing any more.
	for _, obj := range watchedKinds() {
		if _, err := mgr.GetCache().GetInformer(mctx, obj); err != nil {
			stop()
			return nil, fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		stop()
		return nil, fmt.Errorf("cache did not sync")
	}
	return stop, nil
}

// processCPU is this process's CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// watchedKinds are the kinds the claim, pool and class controllers watch
// (their SetupWithManager).
func watchedKinds() []client.Object {
	return []client.Object{&macvirtv1alpha1.MacClaim{}, &macvirtv1alpha1.MacMachine{}, &macvirtv1alpha1.MacClass{},
		&macvirtv1alpha1.MacPool{}, &corev1.Namespace{}, &corev1.Service{}, &discoveryv1.EndpointSlice{}, &cdiv1.DataSource{}}
}
