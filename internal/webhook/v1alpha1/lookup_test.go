package v1alpha1

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// What admission looks up is read from the API server when the cache has
// not seen it yet (GitOps tools apply a namespace, a class and a claim at
// once): a get of a namespace or a class, the only gets of those kinds the
// operator makes.
func TestLookupReadsTheAPIServerWhenTheCacheHasNotSeenIt(t *testing.T) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, macvirtv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	api := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}).Build()
	l := &lookup{cache: fake.NewClientBuilder().WithScheme(s).Build(), api: api}
	ctx := context.Background()
	if ok, err := l.get(ctx, types.NamespacedName{Name: "team"}, &corev1.Namespace{}); !ok || err != nil {
		t.Errorf("namespace: %v %v; want it found past the cache", ok, err)
	}
	if c, err := l.class(ctx, "sonoma"); c == nil || err != nil {
		t.Errorf("class: %v %v; want it found past the cache", c, err)
	}
	if c, err := l.class(ctx, "nosuch"); c != nil || err != nil {
		t.Errorf("a class nowhere: %v %v; want none, and no error", c, err)
	}
}
