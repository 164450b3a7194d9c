// Package controllertest holds what the controllers' unit tests share: a
// fake client that knows macvirt's, KubeVirt's and the core kinds and
// answers the operator's cache indexes as the manager's cache does, and a
// reader of a fake event recorder.
package controllertest

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/index"
)

// Scheme knows macvirt's kinds, the core kinds and KubeVirt's.
func Scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{macvirtv1alpha1.AddToScheme, corev1.AddToScheme, kubevirtv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// indexedBuilder registers the operator's cache indexes on a fake client.
type indexedBuilder struct{ b *fake.ClientBuilder }

func (i indexedBuilder) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// FakeClient is a fake client holding objs, with the status subresource of
// claims, machines and pools and every index of index.Register.
func FakeClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := Scheme(t)
	if err := discoveryv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := networkingv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&macvirtv1alpha1.MacClaim{}, &macvirtv1alpha1.MacMachine{}, &macvirtv1alpha1.MacPool{})
	if err := index.Register(context.Background(), indexedBuilder{b}); err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// Events reads every event the fake recorder holds, one a line.
func Events(rec *events.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}
