package runnercore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

func runnerSet() FleetObject {
	set := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Name: "ios", Namespace: "ci", Generation: 1}}
	set.Status.Conditions = []metav1.Condition{base.StalledCondition(1, nil)}
	return set
}

func buildkiteQueue() FleetObject {
	q := &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Name: "macos", Namespace: "ci", Generation: 1}}
	q.Status.Conditions = []metav1.Condition{base.StalledCondition(1, nil)}
	return q
}

// stall makes o Stalled for reason.
func stall(o FleetObject, reason string) {
	meta.SetStatusCondition(&o.Fleet().Conditions, base.StalledCondition(1, problem(reason)))
}

// answered makes msg the last error o's CI service answered.
func answered(o FleetObject, msg string) {
	e := ServiceError(t0, 503, msg, nil)
	switch o := o.(type) {
	case *macvirtv1alpha1.MacRunnerSet:
		o.Status.LastGitHubError = e
	case *macvirtv1alpha1.MacBuildkiteQueue:
		o.Status.LastBuildkiteError = e
	}
}

func TestWriteStatus(t *testing.T) {
	cases := map[string]struct {
		obj func() FleetObject
		// had and now change the status as read and as computed.
		had, now func(FleetObject)
		reason   string // the set's ServiceErrorReason
		gone     bool   // the fleet was deleted before the write
		refuse   bool   // the API server refuses the write
		patches  int    // status patches tried
		events   []string
		err      bool
	}{
		"an unchanged status is not written": {obj: runnerSet, now: func(FleetObject) {}},
		"a changed status is written, and warns of nothing": {obj: runnerSet, now: func(o FleetObject) { o.Fleet().Desired = 2 },
			patches: 1},
		"turning Stalled warns with its reason": {obj: runnerSet, now: func(o FleetObject) { stall(o, "CredentialsInvalid") },
			patches: 1, events: []string{"Warning CredentialsInvalid because CredentialsInvalid"}},
		"Stalled for the same reason does not warn again": {obj: runnerSet,
			had: func(o FleetObject) { stall(o, "CredentialsInvalid") },
			now: func(o FleetObject) { stall(o, "CredentialsInvalid"); o.Fleet().Pending = 1 }, patches: 1},
		"Stalled for another reason warns again": {obj: runnerSet,
			had: func(o FleetObject) { stall(o, "CredentialsInvalid") }, now: func(o FleetObject) { stall(o, "ClassUnavailable") },
			patches: 1, events: []string{"Warning ClassUnavailable because ClassUnavailable"}},
		"a new error of GitHub's warns as GitHubError": {obj: runnerSet, reason: "GitHubError",
			now: func(o FleetObject) { answered(o, "503 Service Unavailable") }, patches: 1,
			events: []string{"Warning GitHubError 503 Service Unavailable"}},
		"a new error of Buildkite's warns as BuildkiteError": {obj: buildkiteQueue, reason: "BuildkiteError",
			now: func(o FleetObject) { answered(o, "Buildkite answered 503") }, patches: 1,
			events: []string{"Warning BuildkiteError Buildkite answered 503"}},
		"another error warns again": {obj: buildkiteQueue, reason: "BuildkiteError",
			had: func(o FleetObject) { answered(o, "Buildkite answered 503") },
			now: func(o FleetObject) { answered(o, "Buildkite answered 502") }, patches: 1,
			events: []string{"Warning BuildkiteError Buildkite answered 502"}},
		"the same error again does not warn": {obj: runnerSet, reason: "GitHubError",
			had: func(o FleetObject) { answered(o, "503 Service Unavailable") },
			now: func(o FleetObject) { answered(o, "503 Service Unavailable"); o.Fleet().Running = 1 }, patches: 1},
		"a kind that named no reason warns as ServiceError": {obj: runnerSet,
			now: func(o FleetObject) { answered(o, "503 Service Unavailable") }, patches: 1,
			events: []string{"Warning ServiceError 503 Service Unavailable"}},
		"a fleet that is gone warns of nothing": {obj: runnerSet, gone: true, reason: "GitHubError",
			now: func(o FleetObject) { stall(o, "CredentialsInvalid"); answered(o, "503") }, patches: 1},
		"a refused write is an error and warns of nothing": {obj: runnerSet, refuse: true, reason: "GitHubError",
			now: func(o FleetObject) { stall(o, "CredentialsInvalid"); answered(o, "503") }, patches: 1, err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			stored := tc.obj()
			if tc.had != nil {
				tc.had(stored)
			}
			patches := 0
			b := fake.NewClientBuilder().WithScheme(scheme(t)).WithStatusSubresource(stored).
				WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object,
					patch client.Patch, opts ...client.SubResourcePatchOption) error {
					patches++
					if tc.refuse {
						return errors.New("the API server refused")
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				}})
			if !tc.gone {
				b = b.WithObjects(stored)
			}
			c := b.Build()
			rec := events.NewFakeRecorder(8)
			before := stored.DeepCopyObject().(FleetObject)
			if !tc.gone {
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(stored), before); err != nil {
					t.Fatal(err)
				}
			}
			after := before.DeepCopyObject().(FleetObject)
			tc.now(after)
			e := &Engine{Client: c, Recorder: rec}
			err := e.WriteStatus(context.Background(), &Scope{Of: Set{ServiceErrorReason: tc.reason}}, before, after)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %t", err, tc.err)
			}
			if patches != tc.patches {
				t.Errorf("%d status patches, want %d", patches, tc.patches)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if strings.Join(got, "\n") != strings.Join(tc.events, "\n") {
				t.Errorf("events %q, want %q", got, tc.events)
			}
			if tc.patches == 1 && !tc.gone && !tc.refuse {
				read := tc.obj()
				if err := c.Get(context.Background(), client.ObjectKeyFromObject(stored), read); err != nil {
					t.Fatal(err)
				}
				if read.Fleet().Desired != after.Fleet().Desired || read.Fleet().Pending != after.Fleet().Pending ||
					(read.LastServiceError() == nil) != (after.LastServiceError() == nil) {
					t.Errorf("stored status %+v, want %+v", read.Fleet(), after.Fleet())
				}
			}
		})
	}
}
