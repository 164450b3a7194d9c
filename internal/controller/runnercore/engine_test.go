package runnercore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// ciSystem is a CI system that is not GitHub: it hands a Mac its job only
// once the claim is Ready, and answers removals as told.
type ciSystem struct {
	mu         sync.Mutex
	handed     []string
	fresh      map[string]bool
	unregister map[string]error
	forgotten  []string
}

func (c *ciSystem) Task(name string) macvirtv1alpha1.Bootstrap {
	return macvirtv1alpha1.Bootstrap{Script: &macvirtv1alpha1.BootstrapScript{Inline: "#!/bin/sh\nexec agent --job-of " + name + "\n"}}
}

func (c *ciSystem) Hand(_ context.Context, claim *macvirtv1alpha1.MacClaim, fresh bool) (bool, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh == nil {
		c.fresh = map[string]bool{}
	}
	c.fresh[claim.Name] = fresh
	if claim.Status.Phase != macvirtv1alpha1.ClaimReady {
		return false, true, nil
	}
	c.handed = append(c.handed, claim.Name)
	return true, true, nil
}

func (c *ciSystem) Unregister(_ context.Context, name string) error { return c.unregister[name] }

func (c *ciSystem) Forget(_ context.Context, reg Registration) (bool, error) {
	c.forgotten = append(c.forgotten, reg.Name)
	return true, nil
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, macvirtv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// queueSet is a set of some kind other than MacRunnerSet (a MacPool stands
// in for it: the core needs only an object).
func queueSet() Set {
	owner := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci", UID: "u-1"}}
	return Set{Object: owner, Kind: "MacQueue", Label: "example.com/queue", System: "Example CI", ClassName: "sonoma",
		MaxRunners: 3, MinIdle: 1, JobTimeout: time.Hour, RegistrationTimeout: 10 * time.Minute,
		OwnedPool: "queue-ci-ios", PoolLabels: map[string]string{"example.com/queue": "ios", "example.com/queue-namespace": "ci"}}
}

func TestCreateMakesClaimsOfTheBackendsTaskAndHandsThemOnceReady(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&macvirtv1alpha1.MacClaim{}).Build()
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}}
	ci := &ciSystem{}
	s := &Scope{Of: queueSet(), Assigned: 2, Plan: Plan{Create: 2}}
	if proceed, err := e.Create(ctx, s, ci); !proceed || err != nil {
		t.Fatalf("create: %t %v", proceed, err)
	}
	var claims macvirtv1alpha1.MacClaimList
	if err := c.List(ctx, &claims, client.MatchingLabels{"example.com/queue": "ios"}); err != nil || len(claims.Items) != 2 {
		t.Fatalf("claims %d (%v), want 2", len(claims.Items), err)
	}
	for _, cl := range claims.Items {
		b := cl.Spec.Bootstrap
		if b == nil || b.Script == nil || !strings.Contains(b.Script.Inline, "--job-of "+cl.Name) {
			t.Errorf("claim %s does not run the backend's task: %+v", cl.Name, b)
			continue
		}
		if *b.TimeoutSeconds != int32((70*time.Minute).Seconds()) || *b.HoldReady {
			t.Errorf("claim %s: timeout %d holdReady %t, want 4200 false", cl.Name, *b.TimeoutSeconds, *b.HoldReady)
		}
		if cl.Spec.PoolName != "queue-ci-ios" || cl.Spec.ReclaimPolicy != macvirtv1alpha1.ReclaimDelete {
			t.Errorf("claim %s: pool %q reclaim %q", cl.Name, cl.Spec.PoolName, cl.Spec.ReclaimPolicy)
		}
		if ref := metav1.GetControllerOf(&cl); ref == nil || ref.Kind != "MacQueue" || ref.UID != "u-1" {
			t.Errorf("claim %s is not controlled by its set: %v", cl.Name, ref)
		}
		if !ci.fresh[cl.Name] {
			t.Errorf("claim %s was not handed as fresh", cl.Name)
		}
	}
	if len(ci.handed) != 0 {
		t.Fatalf("handed %v before any Mac was Ready", ci.handed)
	}

	// The next reconcile: one claim is Ready. Only it is handed, once.
	ready := claims.Items[0]
	ready.Status.Phase = macvirtv1alpha1.ClaimReady
	if err := c.Status().Update(ctx, &ready); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s = &Scope{Of: queueSet()}
		if _, err := e.ListClaims(ctx, s); err != nil {
			t.Fatal(err)
		}
		for _, cl := range s.Claims {
			s.Plan.Runners = append(s.Plan.Runners, Decision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: cl.Name, State: macvirtv1alpha1.RunnerProvisioning}})
		}
		if proceed, err := e.Hand(ctx, s, ci); !proceed || err != nil {
			t.Fatalf("hand: %t %v", proceed, err)
		}
	}
	if !slices.Equal(ci.handed, []string{ready.Name}) || ci.fresh[ready.Name] {
		t.Errorf("handed %v (fresh %v), want only %s once, not as fresh", ci.handed, ci.fresh, ready.Name)
	}
}

// gate is a CI system whose registrations wait until want of them are in
// flight at once (or a generous time passed), and which refuses the
// registration of the runners named in refuse.
type gate struct {
	ciSystem
	want     int
	refuse   map[int]bool
	inFlight int
	most     int
	calls    int
	arrived  chan struct{}
}

func (g *gate) Hand(context.Context, *macvirtv1alpha1.MacClaim, bool) (bool, bool, error) {
	g.mu.Lock()
	g.calls++
	call := g.calls
	g.inFlight++
	g.most = max(g.most, g.inFlight)
	if g.inFlight == g.want {
		close(g.arrived)
	}
	g.mu.Unlock()
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	if g.refuse[call] {
		return false, false, nil
	}
	return true, true, nil
}

// A burst's runners are made side by side, not one after another: each
// is a few round trips (the claim, the registration, its Secret) that
// wait on no other runner's.
func TestCreateMakesABurstsRunnersSideBySide(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&macvirtv1alpha1.MacClaim{}).Build()
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}}
	ci := &gate{want: 5, arrived: make(chan struct{})}
	s := &Scope{Of: queueSet(), Assigned: 5, Plan: Plan{Create: 5}}
	if proceed, err := e.Create(ctx, s, ci); !proceed || err != nil {
		t.Fatalf("create: %t %v", proceed, err)
	}
	if ci.most != 5 {
		t.Errorf("at most %d registrations in flight at once; want all 5", ci.most)
	}
	var claims macvirtv1alpha1.MacClaimList
	if err := c.List(ctx, &claims); err != nil || len(claims.Items) != 5 || len(s.Claims) != 5 || s.Plan.Pending != 5 {
		t.Fatalf("claims %d (%v), in the scope %d, pending %d; want 5 each", len(claims.Items), err, len(s.Claims), s.Plan.Pending)
	}
	for _, cl := range claims.Items {
		if _, _, handed := e.Handed.Get(cl.UID, e.Now); !handed {
			t.Errorf("claim %s was handed its job and is not recorded so", cl.Name)
		}
	}
}

// A refusal stops the runners not yet started, and every claim that was
// made is in the scope (its status counts it), none lost.
func TestCreateStopsAtARefusalAndKeepsWhatItMade(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(&macvirtv1alpha1.MacClaim{}).Build()
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}}
	// The first registration is refused once CreateConcurrency are in
	// flight; none of the rest of the 3×CreateConcurrency starts.
	ci := &gate{want: CreateConcurrency, refuse: map[int]bool{1: true}, arrived: make(chan struct{})}
	s := &Scope{Of: queueSet(), Assigned: 3 * CreateConcurrency, Plan: Plan{Create: 3 * CreateConcurrency}}
	if proceed, err := e.Create(ctx, s, ci); proceed || err != nil {
		t.Fatalf("create: %t %v; want the steps to end without an error (the backend recorded why)", proceed, err)
	}
	var claims macvirtv1alpha1.MacClaimList
	if err := c.List(ctx, &claims); err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) >= 3*CreateConcurrency || len(claims.Items) < CreateConcurrency {
		t.Errorf("%d claims made; want the %d in flight and not all %d", len(claims.Items), CreateConcurrency, 3*CreateConcurrency)
	}
	if len(s.Claims) != len(claims.Items) {
		t.Errorf("the scope holds %d claims of the %d made", len(s.Claims), len(claims.Items))
	}
	if ci.most != CreateConcurrency {
		t.Errorf("at most %d registrations in flight at once; want CreateConcurrency, %d", ci.most, CreateConcurrency)
	}
}

func TestReleaseFollowsTheBackendsAnswer(t *testing.T) {
	ctx := context.Background()
	names := []string{"ios-aaaaa", "ios-bbbbb", "ios-ccccc", "ios-ddddd"}
	var objs []client.Object
	set := queueSet()
	owner := []metav1.OwnerReference{base.ControllerRef(set.Kind, "ios", "u-1")}
	for _, n := range names {
		objs = append(objs, &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "ci", UID: types.UID(n),
			Labels: map[string]string{"example.com/queue": "ios"}, OwnerReferences: owner}})
	}
	// A tenant's own claim, labelled like a runner's: not the set's.
	objs = append(objs, &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "ios-eeeee", Namespace: "ci", UID: "mine",
		Labels: map[string]string{"example.com/queue": "ios"}}})
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).Build()
	cleanups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cleanups"}, []string{"namespace", "set", "reason"})
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}, Cleanups: cleanups}
	ci := &ciSystem{unregister: map[string]error{
		"ios-aaaaa": ErrBusy,               // surplus, but took a job: kept
		"ios-bbbbb": ErrBusy,               // timed out: its Mac goes anyway
		"ios-ccccc": errors.New("refused"), // surplus, the call failed: kept for the next try
	}}
	s := &Scope{Of: set}
	if _, err := e.ListClaims(ctx, s); err != nil {
		t.Fatal(err)
	}
	if len(s.Claims) != len(names) || s.Claim("ios-eeeee") != nil {
		t.Fatalf("listed %d claims (the tenant's among them: %t), want the set's %d", len(s.Claims), s.Claim("ios-eeeee") != nil, len(names))
	}
	release := func(name, cleanup string) Decision {
		return Decision{RunnerStatus: macvirtv1alpha1.RunnerStatus{Name: name, State: macvirtv1alpha1.RunnerFinishing}, Release: true, Cleanup: cleanup}
	}
	s.Plan.Runners = []Decision{release("ios-aaaaa", CleanupSurplus), release("ios-bbbbb", CleanupJobTimeout),
		release("ios-ccccc", CleanupSurplus), release("ios-ddddd", ""), release("ios-eeeee", CleanupSurplus)}
	if proceed, err := e.Release(ctx, s, ci); !proceed || err != nil {
		t.Fatalf("release: %t %v", proceed, err)
	}
	want := map[string]macvirtv1alpha1.RunnerState{"ios-aaaaa": macvirtv1alpha1.RunnerRunning, "ios-ccccc": macvirtv1alpha1.RunnerIdle}
	for _, d := range s.Plan.Runners {
		err := c.Get(ctx, types.NamespacedName{Namespace: "ci", Name: d.Name}, &macvirtv1alpha1.MacClaim{})
		if d.Name == "ios-eeeee" {
			if err != nil {
				t.Errorf("the tenant's own claim was released: %v", err)
			}
			continue
		}
		if st, kept := want[d.Name]; kept {
			if err != nil || d.State != st || d.Release {
				t.Errorf("%s: %s release %t (%v), want kept %s", d.Name, d.State, d.Release, err, st)
			}
		} else if err == nil {
			t.Errorf("%s: its claim was not deleted", d.Name)
		}
	}
	if n := testutil.ToFloat64(cleanups.WithLabelValues("ci", "ios", CleanupJobTimeout)); n != 1 {
		t.Errorf("job-timeout cleanups %v, want 1", n)
	}
	if n := testutil.CollectAndCount(cleanups); n != 1 {
		t.Errorf("%d cleanup series, want only the timeout's", n)
	}
}

func TestForgetLeakedRemovesOnlyTheSetsRunnersWithoutAClaim(t *testing.T) {
	ctx := context.Background()
	// ios-bbbbb's claim is on the API server but not yet in the scope
	// (the cache lags): it is not a leak.
	api := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		&macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "ios-bbbbb", Namespace: "ci"}}).Build()
	e := &Engine{Client: api, APIReader: api, Handed: &Record{}}
	ci := &ciSystem{}
	s := &Scope{Of: queueSet(), Claims: []macvirtv1alpha1.MacClaim{{ObjectMeta: metav1.ObjectMeta{Name: "ios-aaaaa", Namespace: "ci"}}}}
	listed := []Registration{{1, "ios-aaaaa"}, {2, "ios-bbbbb"}, {3, "ios-ccccc"}, {4, "android-ddddd"}, {5, "ios-toolong"}}
	if err := e.ForgetLeaked(ctx, s, ci, listed); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ci.forgotten, []string{"ios-ccccc"}) {
		t.Errorf("forgot %v, want only ios-ccccc", ci.forgotten)
	}
}

func TestEnsureWarmPoolRefusesAPoolThatIsNotTheSets(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		&macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "queue-ci-ios", Labels: map[string]string{"example.com/queue": "ios"}}}).Build()
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}}
	s := &Scope{Of: queueSet(), Plan: Plan{WarmIdle: 2}}
	if proceed, err := e.EnsureWarmPool(ctx, s); proceed || err != nil || s.Blocked == nil ||
		!strings.Contains(s.Blocked.Message, "not this set's warm pool") {
		t.Fatalf("a pool of another namespace's set was taken: %t %v %+v", proceed, err, s.Blocked)
	}
}

// The set moves its pool's idle target and leaves the pace of new Macs,
// maxProvisioning, to the admin.
func TestEnsureWarmPoolKeepsTheAdminsPace(t *testing.T) {
	ctx := context.Background()
	idle, most := int32(1), int32(6)
	set := queueSet()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		&macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: set.OwnedPool, Labels: set.PoolLabels},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: set.ClassName, Idle: &idle, MaxMachines: &most, MaxProvisioning: 20}}).Build()
	e := &Engine{Client: c, APIReader: c, Handed: &Record{}}
	s := &Scope{Of: set, Plan: Plan{WarmIdle: 3}}
	if proceed, err := e.EnsureWarmPool(ctx, s); !proceed || err != nil {
		t.Fatalf("ensure: %t %v (%+v)", proceed, err, s.Blocked)
	}
	got := &macvirtv1alpha1.MacPool{}
	if err := c.Get(ctx, client.ObjectKey{Name: set.OwnedPool}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Idle == nil || *got.Spec.Idle != 3 || got.Spec.MaxProvisioning != 20 {
		t.Errorf("pool idle %v, maxProvisioning %d; want idle 3 and the admin's 20 kept", got.Spec.Idle, got.Spec.MaxProvisioning)
	}
}
