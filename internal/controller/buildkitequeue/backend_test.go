package buildkitequeue

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/buildkite"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
)

// TestAJobWhoseRecordFailedStaysHanded: the Secret with the job and its
// token was written and the claim's record of it failed. The Mac runs the
// job, so the plan must count it as handed (never release the Mac as
// surplus), and the next Hand records it from the Secret.
func TestAJobWhoseRecordFailedStaysHanded(t *testing.T) {
	ctx := context.Background()
	fbk := fakebuildkite.New("bkct", "macos")
	defer fbk.Close()
	job := fbk.AddJob("true")
	q := &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci", UID: "q-1"},
		Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{MaxAgents: 2, ClassName: "sonoma",
			Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: "macos", TokenSecretName: "bk"}}}
	bkc, err := buildkite.New(fbk.URL(), "bkct", stackKey(q), "macos", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bkc.Register(ctx, nil); err != nil {
		t.Fatal(err)
	}
	set := view(q)
	claim := runnercore.RunnerClaim(&set, "ios-aaaaa", bkTask(q))
	claim.UID, claim.CreationTimestamp = "c-1", metav1.Now()
	claim.Status.Phase = macvirtv1alpha1.ClaimReady
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, macvirtv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	failPatch := true
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(claim).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*macvirtv1alpha1.MacClaim); ok && failPatch {
				return errors.New("the webhook timed out")
			}
			return cl.Patch(ctx, obj, patch, opts...)
		}}).Build()
	r := &Reconciler{Client: c, APIReader: c}
	scope := func() *queueScope {
		qs := &queueScope{Scope: runnercore.Scope{Of: set}, Queue: q, Client: bkc, Poll: r.pollOf(types.NamespacedName{Namespace: "ci", Name: "ios"}),
			Taken: map[string]bool{}}
		qs.Poll.Registered = true
		if _, err := r.listClaims(ctx, qs); err != nil {
			t.Fatal(err)
		}
		if _, err := r.refresh(ctx, qs); err != nil {
			t.Fatal(err)
		}
		qs.Poll.At = metav1.Now().Add(-r.pollEvery()) // poll again next time
		if _, err := r.plan(ctx, qs); err != nil {
			t.Fatal(err)
		}
		return qs
	}

	qs := scope()
	if len(qs.Claims) != 1 || qs.Plan.Runners[0].State != macvirtv1alpha1.RunnerProvisioning {
		t.Fatalf("claims %d, plan %+v", len(qs.Claims), qs.Plan.Runners)
	}
	done, proceed, err := bk{r, qs}.Hand(ctx, &qs.Claims[0], false)
	if done || proceed || err == nil {
		t.Fatalf("Hand with its record failing: done %t proceed %t err %v", done, proceed, err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ci", Name: "ios-aaaaa"}, sec); err != nil || sec.StringData[macvirtv1alpha1.BuildkiteJobKey] != job {
		t.Fatalf("the job Secret: %v %v", err, sec.StringData)
	}

	// Buildkite no longer lists the reserved job: only the plan's memory
	// of the handing keeps the Mac from being surplus.
	qs = scope()
	if d := qs.Decision("ios-aaaaa"); d == nil || d.State != macvirtv1alpha1.RunnerRunning || d.Release || qs.Assigned != 1 {
		t.Fatalf("the Mac that runs the job is %+v, %d jobs assigned", d, qs.Assigned)
	}
	failPatch = false
	if done, proceed, err := (bk{r, qs}).Hand(ctx, &qs.Claims[0], false); !done || !proceed || err != nil {
		t.Fatalf("the next Hand: done %t proceed %t err %v", done, proceed, err)
	}
	got := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil || jobOf(got) == nil || jobOf(got).ID != job {
		t.Fatalf("the claim's record: %v %v", err, got.Annotations)
	}
	if len(qs.Poll.Handing) != 0 {
		t.Errorf("the handing is remembered after its record: %v", qs.Poll.Handing)
	}
}

// bkTask is the queue's guest task for a claim.
func bkTask(q *macvirtv1alpha1.MacBuildkiteQueue) macvirtv1alpha1.Bootstrap {
	return bk{s: &queueScope{Queue: q}}.Task("ios-aaaaa")
}

func TestNamesAreBuildkitesAndTheClustersOwn(t *testing.T) {
	mk := func(ns, name string) *macvirtv1alpha1.MacBuildkiteQueue {
		return &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	long := strings.Repeat("x", 63)
	for _, q := range []*macvirtv1alpha1.MacBuildkiteQueue{mk("ci", "ios"), mk("ci", "ios.release"), mk(long, long+"."+long)} {
		key := stackKey(q)
		if len(key) > 80 || strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("stack key %q (%d) is not one Buildkite takes", key, len(key))
		}
		if pool := ownedPoolName(q); len(pool) > 52 || strings.ContainsAny(pool, "_") {
			t.Errorf("pool name %q (%d) is not one a MacPool takes", pool, len(pool))
		}
	}
	a, b := mk("a-b", "c"), mk("a", "b-c")
	if stackKey(a) == stackKey(b) || ownedPoolName(a) == ownedPoolName(b) {
		t.Errorf("a-b/c and a/b-c share %s or %s", stackKey(a), ownedPoolName(a))
	}
}
