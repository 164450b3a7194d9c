package pool

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// refusingCreates refuses every create, as the API server does for an
// operator whose install left out the right.
type refusingCreates struct{ client.Client }

func (refusingCreates) Create(context.Context, client.Object, ...client.CreateOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("no right"))
}

// A pool makes its namespace when it has machines to make there and the
// namespace is missing, as the install's part: owned by no one, so
// uninstalling macvirt leaves it (and the Macs in it) alone.
func TestAPoolMakesItsMissingNamespace(t *testing.T) {
	pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Spec: macvirtv1alpha1.MacPoolSpec{Namespace: "macvirt-pools"}}
	ctx := context.Background()
	c := controllertest.FakeClient(t)
	rec := events.NewFakeRecorder(4)
	r := &Reconciler{Client: c, Recorder: rec}

	idle := &poolScope{Pool: pool}
	if proceed, err := r.ensurePoolNamespace(ctx, idle); !proceed || err != nil {
		t.Fatalf("nothing to make: %v %v", proceed, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "macvirt-pools"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a pool with nothing to make made its namespace: %v", err)
	}

	s := &poolScope{Pool: pool, Plan: poolPlan{Create: []string{"ci-0"}}}
	if proceed, err := r.ensurePoolNamespace(ctx, s); !proceed || err != nil || s.Blocked != nil {
		t.Fatalf("ensurePoolNamespace: %v %v %+v", proceed, err, s.Blocked)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "macvirt-pools"}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Annotations[base.AnnotationCreatedFor] != "MacPool ci" || len(ns.OwnerReferences) != 0 || ns.Labels["app.kubernetes.io/managed-by"] != "macvirt" {
		t.Errorf("the namespace: %+v, want it marked as macvirt's for pool ci, owned by no one", ns.ObjectMeta)
	}
	if ev := <-rec.Events; !strings.Contains(ev, "NamespaceCreated") || !strings.Contains(ev, "never deletes it") {
		t.Errorf("event %q", ev)
	}
	// Made already: nothing more.
	if proceed, err := r.ensurePoolNamespace(ctx, s); !proceed || err != nil || len(rec.Events) != 0 {
		t.Errorf("again: %v %v, %d events", proceed, err, len(rec.Events))
	}

	// An install without the right: the pool says what to do.
	other := &poolScope{Pool: &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "ios"},
		Spec: macvirtv1alpha1.MacPoolSpec{Namespace: "ios-pools"}}, Plan: poolPlan{Create: []string{"ios-0"}}}
	r.Client = refusingCreates{c}
	if proceed, err := r.ensurePoolNamespace(ctx, other); proceed || err != nil || other.Blocked == nil ||
		other.Blocked.Reason != macvirtv1alpha1.ReasonNamespaceMissing || !strings.Contains(other.Blocked.Message, "could not create it") ||
		!strings.Contains(other.Blocked.Message, "create it or change spec.namespace") {
		t.Errorf("refused: %v %v %+v", proceed, err, other.Blocked)
	}
}
