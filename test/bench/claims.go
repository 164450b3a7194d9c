package main

import (
	"context"
	"fmt"
	"os"
	"sync"
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
		return readyMachine(ctx, c, class, pools[i/maxPoolIdle], i)
	}); err != nil {
		return result{}, err
	}

	writes := &writeCounter{}
	op, err := operator.New(ctx, cfg, operator.Options{NameSuffix: fmt.Sprintf("-%d", n), Controllers: []operator.Controller{operator.ClaimController}, ClaimWorkers: benchWorkers,
		WrapClient: func(inner client.Client) client.Client { return &countingClient{Client: inner, writes: writes} }})
	if err != nil {
		return result{}, err
	}
	stop, err := startOperator(ctx, op)
	if err != nil {
		return result{}, err
	}
	defer stop()
	r, err := measure(ctx, cfg, n, "macvirt", &macvirtv1alpha1.MacClaimList{}, claimNS,
		func(i int) client.Object {
			return &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i), Namespace: claimNS},
				Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pools[i%len(pools)].Name}}
		},
		func(o runtime.Object) (string, bool, bool) {
			cl, ok := o.(*macvirtv1alpha1.MacClaim)
			if !ok {
				return "", false, false
			}
			// A claim whose status names a machine may only have reserved
			// it; bound is when the machine's side is recorded too.
			bound := cl.Status.MachineRef != nil && meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionBound)
			// Ready for its tenant: the machine answers at its address, the
			// Service routes to it and the connection Secret is written.
			ready := bound && meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionReady) &&
				meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionServiceReady) &&
				meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionConnectionSecretReady)
			return cl.GetName(), bound, ready
		}, c, writes)
	r.toBound = writes.toBound(n)
	return r, err
}

// measure creates n objects at once and times each until stages says it
// is bound, and until it says it is ready for its user (for a PVC, bound).
func measure(ctx context.Context, cfg *rest.Config, n int, side string, list client.ObjectList, ns string,
	build func(int) client.Object, stages func(runtime.Object) (name string, bound, ready bool), c client.Client, writes *writeCounter) (result, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return result{}, err
	}
	var mu sync.Mutex
	started := map[string]time.Time{}
	bound, ready := map[string]time.Time{}, map[string]time.Time{}
	all := make(chan struct{})
	record := func(o runtime.Object) {
		name, isBound, isReady := stages(o)
		mu.Lock()
		defer mu.Unlock()
		if _, seen := bound[name]; isBound && !seen && len(bound) < n {
			bound[name] = time.Now()
		}
		if _, seen := ready[name]; isReady && !seen && len(ready) < n {
			ready[name] = time.Now()
			if len(ready) == n {
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
	writes.reset()
	before, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	stopProfiles, err := startProfiles(ctx, cfg, fmt.Sprintf("%d-%s", n, side))
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
		stopProfiles()
		return result{}, err
	}
	created := time.Since(begin)
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		stopProfiles()
		mu.Lock()
		defer mu.Unlock()
		return result{}, fmt.Errorf("only %d of %d bound and %d ready after 2 minutes", len(bound), len(ready), n)
	}
	// Work a binder does after the last claim is ready (events, a last
	// status) belongs to this side too.
	time.Sleep(settle)
	stopProfiles()
	after, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	r := result{writes: writes.total.Load(), created: created, server: after.minus(before), processCPU: processCPU() - cpuBefore}
	r.latencies, r.elapsed = since(started, bound, begin)
	r.readyLatencies, r.readyElapsed = since(started, ready, begin)
	return r, nil
}

// since is each object's time from its create to at, and the time from
// begin to the last of them.
func since(started, at map[string]time.Time, begin time.Time) ([]time.Duration, time.Duration) {
	var out []time.Duration
	var last time.Time
	for name, t := range at {
		out = append(out, t.Sub(started[name]))
		if t.After(last) {
			last = t
		}
	}
	return out, last.Sub(begin)
}

// settle is how long a side's server load is still counted after its last
// bind.
const settle = time.Second

// followWatch feeds every event to record until ctx is done. A watch the
// API server ends (it drops watchers that fall behind under load) is
// resumed from the last resourceVersion seen; only when that is too old
// does it relist, which costs the server a list of every object and would
// be counted against the side measured.
func followWatch(ctx context.Context, wc client.WithWatch, w watch.Interface, list client.ObjectList, ns string, record func(runtime.Object)) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				record(ev.Object)
				if o, ok := ev.Object.(client.Object); ok {
					rv = o.GetResourceVersion()
				}
			case watch.Error:
				// Most likely 410 Gone: rv is too old to resume from.
				rv = ""
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return
		}
		if rv == "" {
			fresh := list.DeepCopyObject().(client.ObjectList)
			if err := wc.List(ctx, fresh, client.InNamespace(ns)); err == nil {
				_ = meta.EachListItem(fresh, func(o runtime.Object) error { record(o); return nil })
				rv = fresh.GetResourceVersion()
			}
		}
		var err error
		if w, err = wc.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}); err != nil {
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

// readyMachine creates pool machine i, controlled by the pool as the pool
// controller makes them, and marks it Ready at a pod-network address of its
// own, as the machine controller would once its guest answered.
func readyMachine(ctx context.Context, c client.Client, class *macvirtv1alpha1.MacClass, pool *macvirtv1alpha1.MacPool, i int) error {
	name := fmt.Sprintf("bench-%d", i)
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
	m.Status.NodeName = "mac-node-1"
	m.Status.Addresses = []string{fmt.Sprintf("10.128.%d.%d", i/250, i%250+1)}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady,
		Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "ready"})
	return c.Status().Update(ctx, m)
}

// startOperator starts op and waits for its caches and for the informers
// its controllers watch; stop ends it and waits until it has returned, so
// nothing is still syncing when the API server goes away (which
// controller-runtime reports as errors with stack traces).
func startOperator(ctx context.Context, op *operator.Operator) (stop func(), err error) {
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Start(mctx) }()
	mgr := op.Manager()
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
