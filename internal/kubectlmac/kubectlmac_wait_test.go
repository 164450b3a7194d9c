package kubectlmac

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// waitFake is a fake cluster that can list claims by metadata.name, as the
// API server can.
func waitFake(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&macvirtv1alpha1.MacClaim{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).Build()
}

// waitEnv is an Env whose clock stands still and whose poll interval is an
// hour: a wait that polled would not end within a test.
func waitEnv(c client.WithWatch) (*Env, *bytes.Buffer) {
	var out bytes.Buffer
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	return &Env{Client: c, Namespace: "team", Streams: Streams{Out: &out, Err: &out},
		Now: func() time.Time { return now }, PollInterval: time.Hour}, &out
}

// pendingClaim is claim team/build on its way: Ready False, Binding.
func pendingClaim() *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", Generation: 1},
		Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"}}
	c.Status.Phase = macvirtv1alpha1.ClaimPending
	setReady(c, metav1.ConditionFalse, "Binding", "finding a machine")
	return c
}

func setReady(c *macvirtv1alpha1.MacClaim, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: status,
		Reason: reason, Message: message, ObservedGeneration: c.Generation})
}

// advance moves the claim in the fake cluster to its next step. It may run
// off the test's goroutine, so it fails the test without stopping it.
func advance(t *testing.T, c client.Client, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	claim := &macvirtv1alpha1.MacClaim{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "build"}, claim); err != nil {
		t.Error(err)
		return
	}
	setReady(claim, status, reason, message)
	if status == metav1.ConditionTrue {
		claim.Status.Phase = macvirtv1alpha1.ClaimReady
	}
	if err := c.Update(context.Background(), claim); err != nil {
		t.Error(err)
	}
}

// watched is base, telling on the returned channel when a watch has begun,
// and failing the test if the claim is read by a Get (a poll).
func watched(t *testing.T, base client.WithWatch) (client.WithWatch, <-chan struct{}) {
	watching := make(chan struct{}, 10)
	return interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, claim := obj.(*macvirtv1alpha1.MacClaim); claim {
				t.Errorf("wait read %s with a Get, want a list and a watch", key)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			watching <- struct{}{}
			return w, err
		},
	}), watching
}

type waitResult struct {
	code int
	err  error
}

func awaitWatch(t *testing.T, watching <-chan struct{}) {
	t.Helper()
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("wait never watched the claim")
	}
}

func awaitResult(t *testing.T, done <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not see the claim change within 5s (with an hour's poll interval)")
	}
	return waitResult{}
}

func TestWaitSeesTheClaimTurnReadyByAWatch(t *testing.T) {
	base := waitFake(t, pendingClaim())
	c, watching := watched(t, base)
	env, out := waitEnv(c)
	done := make(chan waitResult, 1)
	start := time.Now()
	go func() {
		code, err := (&waitCmd{timeout: time.Minute}).run(context.Background(), env, []string{"build"})
		done <- waitResult{code, err}
	}()
	awaitWatch(t, watching)
	advance(t, base, metav1.ConditionFalse, "Provisioning", "starting the Mac")
	advance(t, base, metav1.ConditionTrue, "Ready", "the Mac is up")
	r := awaitResult(t, done)
	if r.code != 0 || r.err != nil {
		t.Fatalf("wait: exit %d, %v", r.code, r.err)
	}
	if elapsed := time.Since(start); elapsed >= time.Second {
		t.Errorf("wait took %s, want the change seen at once, not at a 1 s poll", elapsed)
	}
	want := "  Binding: finding a machine\n  Provisioning: starting the Mac\nmacclaim team/build is Ready after 0s: kubectl mac ssh build\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestClaimWaitSeesTheNewClaimTurnReady(t *testing.T) {
	base := waitFake(t, &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}})
	c, watching := watched(t, base)
	env, out := claimEnv(t, c)
	done := make(chan waitResult, 1)
	go func() {
		code, err := (&claimCmd{class: "sonoma", wait: true, timeout: time.Minute}).run(context.Background(), env, []string{"build"})
		done <- waitResult{code, err}
	}()
	awaitWatch(t, watching)
	advance(t, base, metav1.ConditionTrue, "Ready", "the Mac is up")
	if r := awaitResult(t, done); r.code != 0 || r.err != nil {
		t.Fatalf("claim --wait: exit %d, %v", r.code, r.err)
	}
	want := "macclaim team/build created\n  waiting for the operator\nmacclaim team/build is Ready after 0s: kubectl mac ssh build\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWaitWatchesAgainFromTheLastVersionAndRelistsOnGone(t *testing.T) {
	base := waitFake(t, pendingClaim())
	event := func(name, rv string, status metav1.ConditionStatus, reason, message string) *macvirtv1alpha1.MacClaim {
		c := pendingClaim()
		c.Name, c.ResourceVersion = name, rv
		setReady(c, status, reason, message)
		return c
	}
	// The first watch sees a step and a bookmark, then ends; the second is
	// told its version is too old; the third sees another claim turn Ready,
	// then this one.
	w1, w2, w3 := watch.NewFakeWithChanSize(5, false), watch.NewFakeWithChanSize(5, false), watch.NewFakeWithChanSize(5, false)
	w1.Modify(event("build", "7", metav1.ConditionFalse, "Provisioning", "starting the Mac"))
	w1.Action(watch.Bookmark, &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9"}})
	w1.Stop()
	w2.Error(&apierrors.NewResourceExpired("too old resource version: 9 (12)").ErrStatus)
	w3.Modify(event("other", "13", metav1.ConditionTrue, "Ready", "the other Mac is up"))
	w3.Modify(event("build", "14", metav1.ConditionTrue, "Ready", "the Mac is up"))
	watchers := []watch.Interface{w1, w2, w3}

	var mu sync.Mutex
	var lists int
	var listRVs, watchRVs []string
	c := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			mu.Lock()
			defer mu.Unlock()
			lists++
			// The fake gives a list no version; the API server does.
			list.SetResourceVersion(strconv.Itoa(100 + lists))
			listRVs = append(listRVs, list.GetResourceVersion())
			return err
		},
		Watch: func(_ context.Context, _ client.WithWatch, _ client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			o := (&client.ListOptions{}).ApplyOptions(opts)
			if o.Namespace != "team" || o.FieldSelector == nil || o.FieldSelector.String() != "metadata.name=build" || o.Raw == nil || !o.Raw.AllowWatchBookmarks {
				t.Errorf("watch in %q, fields %v, raw %+v; want the one claim, with bookmarks", o.Namespace, o.FieldSelector, o.Raw)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(watchers) == 0 {
				t.Error("a fourth watch")
				return nil, errors.New("no more watches")
			}
			rv := ""
			if o.Raw != nil {
				rv = o.Raw.ResourceVersion
			}
			watchRVs = append(watchRVs, rv)
			if len(watchers) == 2 {
				// What the relist after the second watch reads.
				advance(t, base, metav1.ConditionFalse, "Provisioning", "starting the Mac")
			}
			w := watchers[0]
			watchers = watchers[1:]
			return w, nil
		},
	})
	env, out := waitEnv(c)
	done := make(chan waitResult, 1)
	go func() {
		code, err := waitReady(context.Background(), env, "build", time.Minute)
		done <- waitResult{code, err}
	}()
	if r := awaitResult(t, done); r.code != 0 || r.err != nil {
		t.Fatalf("wait: exit %d, %v", r.code, r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if lists != 2 {
		t.Errorf("%d lists, want one at the start and one after 410 Gone", lists)
	}
	if want := []string{"101", "9", "102"}; !reflect.DeepEqual(watchRVs, want) {
		t.Errorf("watches from versions %q, want %q: the first list's, the bookmark's, the list's after 410 Gone", watchRVs, want)
	}
	want := "  Binding: finding a machine\n  Provisioning: starting the Mac\nmacclaim team/build is Ready after 0s: kubectl mac ssh build\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestWaitGivesUpAtTheTimeoutAndOnCancel(t *testing.T) {
	env, _ := waitEnv(waitFake(t, pendingClaim()))
	start := time.Now()
	code, err := waitReady(context.Background(), env, "build", 50*time.Millisecond)
	if code != 1 || err == nil || err.Error() != "macclaim team/build is not Ready after 50ms: Binding: finding a machine" {
		t.Errorf("timeout: exit %d, %v", code, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if code, err := waitReady(ctx, env, "build", time.Hour); code != 1 || err == nil || !strings.Contains(err.Error(), "is not Ready after 1h0m0s") {
		t.Errorf("cancel: exit %d, %v", code, err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("giving up took %s", elapsed)
	}
}

func TestWaitEndsWhenTheClaimIsGoneStalledOrLost(t *testing.T) {
	env, _ := waitEnv(waitFake(t))
	if code, err := waitReady(context.Background(), env, "build", time.Minute); code != 1 || err == nil || err.Error() != "macclaim team/build does not exist" {
		t.Errorf("no claim: exit %d, %v", code, err)
	}

	base := waitFake(t, pendingClaim())
	c, watching := watched(t, base)
	env, _ = waitEnv(c)
	done := make(chan waitResult, 1)
	go func() {
		code, err := waitReady(context.Background(), env, "build", time.Minute)
		done <- waitResult{code, err}
	}()
	awaitWatch(t, watching)
	if err := base.Delete(context.Background(), pendingClaim()); err != nil {
		t.Fatal(err)
	}
	if r := awaitResult(t, done); r.code != 1 || r.err == nil || r.err.Error() != "macclaim team/build was deleted" {
		t.Errorf("deleted: exit %d, %v", r.code, r.err)
	}

	stalled := pendingClaim()
	meta.SetStatusCondition(&stalled.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: "NoCapacity", Message: "no host has room"})
	env, _ = waitEnv(waitFake(t, stalled))
	if code, err := waitReady(context.Background(), env, "build", time.Minute); code != 1 || err == nil || !strings.Contains(err.Error(), "needs a human (NoCapacity): no host has room") {
		t.Errorf("stalled: exit %d, %v", code, err)
	}

	lost := pendingClaim()
	lost.Status.Phase = macvirtv1alpha1.ClaimLost
	env, _ = waitEnv(waitFake(t, lost))
	if code, err := waitReady(context.Background(), env, "build", time.Minute); code != 1 || err == nil || !strings.Contains(err.Error(), "is Lost") {
		t.Errorf("lost: exit %d, %v", code, err)
	}
}
