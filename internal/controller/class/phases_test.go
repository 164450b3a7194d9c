package class

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/render"
)

// A machine may keep its class revision from an older cached copy of the
// class in the moment the class controller replaces that revision's
// snapshot; the class's current spec must still be what is kept in the end.
func TestEnsureSnapshotReplacesASnapshotRecreatedFromAnOlderCopy(t *testing.T) {
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	allow, one, two := true, int32(1), int32(2)
	older := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "mac", Generation: 1}}
	older.Spec.Tenancy.AllowRetain, older.Spec.Tenancy.MaxReleasedPerNamespace = &allow, &one
	current := older.DeepCopy()
	current.Generation, current.Spec.Tenancy.MaxReleasedPerNamespace = 2, &two
	revision := render.ClassRevision(current)
	if render.ClassRevision(older) != revision {
		t.Fatal("the test needs a change the revision does not hash")
	}
	stale, err := classhistory.New("macvirt-system", older, revision)
	if err != nil {
		t.Fatal(err)
	}
	raced := false
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(stale.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*appsv1.ControllerRevision); ok && !raced {
				raced = true
				if err := c.Create(ctx, stale.DeepCopy()); err != nil {
					t.Fatalf("the machine's create: %v", err)
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	r := &Reconciler{Client: c, APIReader: c, Namespace: "macvirt-system"}
	scope := &classScope{Name: "mac", Class: current, Revision: revision}

	if proceed, err := r.ensureSnapshot(context.Background(), scope); err == nil || proceed {
		t.Fatalf("ensureSnapshot after a concurrent create = (%v, %v), want a retry", proceed, err)
	}
	if proceed, err := r.ensureSnapshot(context.Background(), scope); err != nil || !proceed {
		t.Fatalf("ensureSnapshot on retry = (%v, %v), want (true, nil)", proceed, err)
	}
	kept := &appsv1.ControllerRevision{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(stale), kept); err != nil {
		t.Fatal(err)
	}
	if !classhistory.Holds(kept, current) {
		t.Errorf("the snapshot holds %s, want the class's current spec", kept.Data.Raw)
	}
}
