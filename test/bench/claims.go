package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/internal/render"
)

// maxPoolIdle is the most idle machines a MacPool may ask for.
const maxPoolIdle = 1000

// The namespaces of the macvirt side: the pools' machines, and the claims.
const poolNS, claimNS = "bench-pool", "bench-claims"

// warmPool is n Ready idle machines, each with its NetworkPolicy as the
// machine controller made it while unbound, in pools of at most
// maxPoolIdle.
type warmPool struct {
	pools []*macvirtv1alpha1.MacPool
}

// claim is claim i of the pools, spread over them.
func (w warmPool) claim(i int) client.Object {
	return &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i), Namespace: claimNS},
		Spec: macvirtv1alpha1.MacClaimSpec{PoolName: w.pools[i%len(w.pools)].Name}}
}

// makeWarmPool creates the class, the namespaces, the pools and n Ready
// idle machines with their NetworkPolicies.
func makeWarmPool(ctx context.Context, c client.Client, n int) (warmPool, error) {
	class, err := benchClass(ctx, c)
	if err != nil {
		return warmPool{}, err
	}
	for _, ns := range []string{poolNS, claimNS} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return warmPool{}, err
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
			return warmPool{}, err
		}
	}
	if err := parallel(n, func(i int) error {
		return readyMachine(ctx, c, class, pools[i/maxPoolIdle], i)
	}); err != nil {
		return warmPool{}, err
	}
	return warmPool{pools: pools}, nil
}

// claimWatches are the macvirt side's watches: machines, bound when their
// spec.claimRef names a claim (the binding itself), and claims, ready when
// their Ready condition is True (the whole readiness criterion: Bound,
// the machine Ready at its address, its NetworkPolicy letting the claim's
// namespace in, recorded in one status write).
func claimWatches() []watchSpec {
	return []watchSpec{
		{list: &macvirtv1alpha1.MacMachineList{}, ns: poolNS, stages: func(o runtime.Object) (string, bool, bool) {
			m, ok := o.(*macvirtv1alpha1.MacMachine)
			if !ok || m.Spec.ClaimRef == nil || m.Spec.ClaimRef.Namespace != claimNS {
				return "", false, false
			}
			return m.Spec.ClaimRef.Name, true, false
		}},
		{list: &macvirtv1alpha1.MacClaimList{}, ns: claimNS, stages: func(o runtime.Object) (string, bool, bool) {
			cl, ok := o.(*macvirtv1alpha1.MacClaim)
			if !ok {
				return "", false, false
			}
			return cl.Name, false, meta.IsStatusConditionTrue(cl.Status.Conditions, macvirtv1alpha1.ConditionReady)
		}},
	}
}

// benchClaims binds n claims over n Ready idle machines with the claim and
// exposure controllers in the operator's process, and measures each claim
// from its create call to the first watch event showing its machine bound
// to it, and to the first showing it Ready.
func benchClaims(ctx context.Context, env *envtest.Environment, c client.Client, n int, label string) (result, error) {
	pool, err := makeWarmPool(ctx, c, n)
	if err != nil {
		return result{}, err
	}
	op, err := startOperatorProcess(env)
	if err != nil {
		return result{}, err
	}
	defer op.stop()
	r, err := measure(ctx, env.Config, c, side{label: label, n: n, build: pool.claim, watches: claimWatches(), binder: op})
	if err != nil {
		return r, err
	}
	r.bytes, err = sizeOf(ctx, c, macvirtv1alpha1.GroupVersion.WithKind("MacClaim"), types.NamespacedName{Namespace: claimNS, Name: "c-0"})
	return r, err
}

// side is what measure needs of one side of a run.
type side struct {
	// label names the side's profiles: <n>-<side>-run<k>.
	label string
	n     int
	// build is object i, the one created i-th.
	build   func(int) client.Object
	watches []watchSpec
	// binder is the process that binds; its CPU is read over the window.
	binder binder
	// oneAtATime creates each object once the one before is ready and the
	// API server is quiet again (the single-claim latency).
	oneAtATime bool
}

// binder is the process binding a side's objects.
type binder interface {
	pid() int
	// begin and end bracket the window inside the process, where it
	// counts (the operator); end says what it counted, nil for none.
	begin(label string) error
	end() (*opReport, error)
}

// watchSpec is one watch of a side: the objects of list in ns, and what
// each event of one says of the object measured it is about (its name, ""
// for none): bound, and ready for its user.
type watchSpec struct {
	list   client.ObjectList
	ns     string
	stages func(runtime.Object) (name string, bound, ready bool)
}

// result is one side's measurements in one run.
type result struct {
	n int
	// bound and ready are each object's time from its create call to the
	// first watch event showing it bound (a machine's claimRef naming the
	// claim; a PVC Bound) and ready for its user (a claim Ready; a PVC
	// bound); boundElapsed and readyElapsed from the first create to the
	// last of them.
	bound, ready               []time.Duration
	boundElapsed, readyElapsed time.Duration
	// created is how long the n create calls took; no binder can finish
	// sooner, so it bounds binds per second from above.
	created time.Duration
	// server is the API server's load from the first create until settle
	// after the last one ready, the bench's own creates included.
	server serverLoad
	// binderCPU is the binder's process CPU seconds (user and system) over
	// the same window, benchCPU this process's (creates and watches).
	binderCPU, benchCPU float64
	// op is the operator's count of its writes over the window; nil for
	// the PV binder.
	op *opReport
	// bytes is the size of one object at the end: a Ready claim, a bound
	// PVC.
	bytes objectSize
}

// measure creates s.n objects, all at once or one at a time, and times
// each until the watches see it bound and ready. Before the first create,
// the API server is idle.
func measure(ctx context.Context, cfg *rest.Config, c client.Client, s side) (result, error) {
	n := s.n
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return result{}, err
	}
	var mu sync.Mutex
	started := map[string]time.Time{}
	bound, ready := map[string]time.Time{}, map[string]time.Time{}
	all, done := make(chan struct{}), false
	readied := make(chan string, n)
	record := func(name string, isBound, isReady bool) {
		if name == "" {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, seen := bound[name]; isBound && !seen && len(bound) < n {
			bound[name] = now
		}
		if _, seen := ready[name]; isReady && !seen && len(ready) < n {
			ready[name] = now
			readied <- name
		}
		if len(bound) == n && len(ready) == n && !done {
			done = true
			close(all)
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	for _, w := range s.watches {
		first, err := wc.Watch(wctx, w.list, client.InNamespace(w.ns))
		if err != nil {
			return result{}, err
		}
		// A watch the API server closes (a slow reader under load) is
		// replaced after a relist, so no binding goes unseen.
		go followWatch(wctx, wc, first, w.list, w.ns, func(o runtime.Object) { record(w.stages(o)) })
	}
	if err := waitIdle(ctx, cfg, time.Second, time.Minute); err != nil {
		return result{}, err
	}
	if err := s.binder.begin(s.label); err != nil {
		return result{}, err
	}
	before, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	stopProfiles, err := startProfiles(ctx, cfg, s.label)
	if err != nil {
		return result{}, err
	}
	binderBefore, err := procCPU(s.binder.pid())
	if err != nil {
		stopProfiles()
		return result{}, err
	}
	benchBefore := processCPU()
	begin := time.Now()
	create := func(i int) error {
		obj := s.build(i)
		mu.Lock()
		started[obj.GetName()] = time.Now()
		mu.Unlock()
		return c.Create(ctx, obj)
	}
	timeout := 3 * time.Minute
	if s.oneAtATime {
		for i := range n {
			if err := create(i); err != nil {
				stopProfiles()
				return result{}, err
			}
			select {
			case <-readied:
			case <-time.After(30 * time.Second):
				stopProfiles()
				return result{}, fmt.Errorf("claim %d of %d not ready after 30 s", i+1, n)
			}
			// A quiet cluster for the next: what follows Ready (the
			// claim's name published) is done.
			if err := waitIdle(ctx, cfg, 250*time.Millisecond, 10*time.Second); err != nil {
				stopProfiles()
				return result{}, err
			}
		}
	} else if err := parallel(n, create); err != nil {
		stopProfiles()
		return result{}, err
	}
	created := time.Since(begin)
	select {
	case <-all:
	case <-time.After(timeout):
		stopProfiles()
		mu.Lock()
		defer mu.Unlock()
		return result{}, fmt.Errorf("after %s, only %d of %d bound and %d ready", timeout, len(bound), n, len(ready))
	}
	// Work a binder does after the last object is ready (events, a last
	// status, a claim's name published) belongs to this side too.
	time.Sleep(settle)
	stopProfiles()
	after, err := sampleServer(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	binderAfter, err := procCPU(s.binder.pid())
	if err != nil {
		return result{}, err
	}
	r := result{n: n, created: created, server: after.minus(before), binderCPU: binderAfter - binderBefore, benchCPU: processCPU() - benchBefore}
	if r.op, err = s.binder.end(); err != nil {
		return result{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	r.bound, r.boundElapsed = since(started, bound, begin)
	r.ready, r.readyElapsed = since(started, ready, begin)
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
// object is ready.
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

// objectSize is an object's size as JSON, as the API server stores and
// serves it: in full (managedFields included), and without managedFields.
type objectSize struct {
	full, withoutManagedFields int
}

// sizeOf reads one object as unstructured, so nothing the API server
// sends is dropped, and measures it.
func sizeOf(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key types.NamespacedName) (objectSize, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, key, u); err != nil {
		return objectSize{}, fmt.Errorf("reading %s %s for its size: %w", gvk.Kind, key, err)
	}
	full, err := json.Marshal(u.Object)
	if err != nil {
		return objectSize{}, err
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	bare, err := json.Marshal(u.Object)
	if err != nil {
		return objectSize{}, err
	}
	return objectSize{full: len(full), withoutManagedFields: len(bare)}, nil
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
// controller makes them, marks it Ready at a pod-network address of its
// own, as the machine controller would once its guest answered, and
// creates its NetworkPolicy as the machine controller made it while the
// machine was unbound (letting nothing in).
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
	if err := c.Create(ctx, render.NetworkPolicy(class, m, render.Exposure{})); err != nil {
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

// watchedKinds are the kinds the claim, exposure, pool and class
// controllers watch (their SetupWithManager).
func watchedKinds() []client.Object {
	return []client.Object{&macvirtv1alpha1.MacClaim{}, &macvirtv1alpha1.MacMachine{}, &macvirtv1alpha1.MacClass{},
		&macvirtv1alpha1.MacPool{}, &corev1.Namespace{}, &corev1.Service{}, &discoveryv1.EndpointSlice{},
		&networkingv1.NetworkPolicy{}, &cdiv1.DataSource{}}
}
