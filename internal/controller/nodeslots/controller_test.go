package nodeslots

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/controller/index"
)

func TestARefusedSlotsWriteIsSaidOnTheNodeInTheAPIServersWords(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mac-1", Labels: map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}}}
	b := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(node).WithInterceptorFuncs(interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return apierrors.NewForbidden(corev1.Resource("nodes/status"), "mac-1", errors.New("a policy keeps nodes' status to their kubelet"))
		},
	})
	b.WithIndex(&kubevirtv1.VirtualMachineInstance{}, index.InstanceNode, func(client.Object) []string { return nil })
	rec := events.NewFakeRecorder(8)
	r := &Reconciler{Client: b.Build(), Recorder: rec}
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "mac-1"}})
	want := `nodes/status "mac-1" is forbidden: a policy keeps nodes' status to their kubelet`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Reconcile = %v; want the refusal returned for a retry", err)
	}
	if got := controllertest.Events(rec); !strings.Contains(got, "Warning SlotsNotAdvertised") || !strings.Contains(got, want) {
		t.Fatalf("events:\n%s\nwant a SlotsNotAdvertised Warning in the API server's words", got)
	}
}
