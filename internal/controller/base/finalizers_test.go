package base

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const testFinalizer = "macvirt.io/test"

// finalizerFixture is an object in a fake API server, with the finalizers
// given, and a client that counts its patches and fails them with refuse
// when it is set.
type finalizerFixture struct {
	obj     *corev1.ConfigMap
	client  client.Client
	patches int
}

func newFinalizerFixture(t *testing.T, stored bool, refuse error, finalizers ...string) *finalizerFixture {
	t.Helper()
	f := &finalizerFixture{obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "mac", Finalizers: finalizers}}}
	b := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			f.patches++
			if refuse != nil {
				return refuse
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	if stored {
		b = b.WithObjects(f.obj.DeepCopy())
	}
	f.client = b.Build()
	if stored {
		// The caller's copy, as a reconcile reads it: with its resourceVersion.
		if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.obj), f.obj); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// stored is the finalizers the fake API server holds.
func (f *finalizerFixture) stored(t *testing.T) []string {
	t.Helper()
	got := &corev1.ConfigMap{}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(f.obj), got); err != nil {
		t.Fatal(err)
	}
	return got.Finalizers
}

var refused = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "mac", errors.New("a policy says no"))

func TestEnsureFinalizer(t *testing.T) {
	for name, tc := range map[string]struct {
		has     []string
		refuse  error
		want    []string // on the caller's copy
		stored  []string // in the API server
		added   bool
		patches int
		wantErr bool
	}{
		"missing: added, next to another": {has: []string{"other.io/keep"}, want: []string{"other.io/keep", testFinalizer},
			stored: []string{"other.io/keep", testFinalizer}, added: true, patches: 1},
		"present: no patch": {has: []string{testFinalizer}, want: []string{testFinalizer}, stored: []string{testFinalizer}},
		"refused: the copy is left as it was": {has: []string{"other.io/keep"}, refuse: refused, want: []string{"other.io/keep"},
			stored: []string{"other.io/keep"}, patches: 1, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFinalizerFixture(t, true, tc.refuse, tc.has...)
			added, err := EnsureFinalizer(context.Background(), f.client, f.obj, testFinalizer)
			if (err != nil) != tc.wantErr || added != tc.added {
				t.Fatalf("EnsureFinalizer = %v, %v; want added %v, error %v", added, err, tc.added, tc.wantErr)
			}
			if err != nil && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "adding finalizer "+testFinalizer+" to ConfigMap team/mac")) {
				t.Errorf("error %q lost its cause or its context", err)
			}
			if !slices.Equal(f.obj.Finalizers, tc.want) {
				t.Errorf("the caller's copy has %v, want %v", f.obj.Finalizers, tc.want)
			}
			if got := f.stored(t); !slices.Equal(got, tc.stored) {
				t.Errorf("the API server holds %v, want %v", got, tc.stored)
			}
			if f.patches != tc.patches {
				t.Errorf("%d patches, want %d", f.patches, tc.patches)
			}
		})
	}
}

func TestRemoveFinalizer(t *testing.T) {
	for name, tc := range map[string]struct {
		has     []string
		gone    bool // the object is no longer in the API server
		refuse  error
		want    []string // on the caller's copy
		stored  []string // in the API server
		removed bool
		patches int
		wantErr bool
	}{
		"present: removed, the other kept": {has: []string{"other.io/keep", testFinalizer}, want: []string{"other.io/keep"},
			stored: []string{"other.io/keep"}, removed: true, patches: 1},
		"absent: no patch": {has: []string{"other.io/keep"}, want: []string{"other.io/keep"}, stored: []string{"other.io/keep"}},
		"the object is gone: nothing left to let go of": {has: []string{testFinalizer}, gone: true, want: []string{}, removed: true, patches: 1},
		"refused: the copy is left as it was": {has: []string{testFinalizer}, refuse: refused, want: []string{testFinalizer},
			stored: []string{testFinalizer}, patches: 1, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFinalizerFixture(t, !tc.gone, tc.refuse, tc.has...)
			removed, err := RemoveFinalizer(context.Background(), f.client, f.obj, testFinalizer)
			if (err != nil) != tc.wantErr || removed != tc.removed {
				t.Fatalf("RemoveFinalizer = %v, %v; want removed %v, error %v", removed, err, tc.removed, tc.wantErr)
			}
			if err != nil && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "removing finalizer "+testFinalizer+" from ConfigMap team/mac")) {
				t.Errorf("error %q lost its cause or its context", err)
			}
			if !slices.Equal(f.obj.Finalizers, tc.want) {
				t.Errorf("the caller's copy has %v, want %v", f.obj.Finalizers, tc.want)
			}
			if !tc.gone {
				if got := f.stored(t); !slices.Equal(got, tc.stored) {
					t.Errorf("the API server holds %v, want %v", got, tc.stored)
				}
			}
			if f.patches != tc.patches {
				t.Errorf("%d patches, want %d", f.patches, tc.patches)
			}
		})
	}
}
