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

// TestOnlyMacvirtsInstancesHoldSlotsUnrequested follows each instance's
// owner chain: an instance holds a slot without requesting one only when
// its controller is the VM of its name and that VM's controller is a
// MacMachine under the UID it names. A label, or an owner reference to a
// tenant's own VM, is not enough.
func TestOnlyMacvirtsInstancesHoldSlotsUnrequested(t *testing.T) {
	machine := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools", UID: "machine-uid"}}
	controls := func(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr(true)}}
	}
	vm := func(ns, name string, uid types.UID, owners []metav1.OwnerReference) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, OwnerReferences: owners}}
	}
	objs := []client.Object{machine,
		vm("pools", "m", "vm-uid", controls("macvirt.io/v1alpha1", "MacMachine", "m", "machine-uid")),
		vm("evil", "own", "own-uid", nil),
		vm("pools", "stale", "stale-uid", controls("macvirt.io/v1alpha1", "MacMachine", "m", "an-earlier-machine")),
		vm("evil", "fake", "fake-uid", controls("example.com/v1", "MacMachine", "m", "machine-uid")),
		vm("pools", "hog", "hog-uid", controls("macvirt.io/v1alpha1", "MacMachine", "m", "machine-uid")),
	}
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(objs...).Build()}
	for _, tc := range []struct {
		name, ns, vmi string
		owners        []metav1.OwnerReference
		want          bool
	}{
		{"macvirt's", "pools", "m", controls("kubevirt.io/v1", "VirtualMachine", "m", "vm-uid"), true},
		{"no owner, only the label", "evil", "squatter", nil, false},
		{"a tenant's own VM", "evil", "own", controls("kubevirt.io/v1", "VirtualMachine", "own", "own-uid"), false},
		{"a VM of another name", "pools", "other", controls("kubevirt.io/v1", "VirtualMachine", "m", "vm-uid"), false},
		{"a VM under another UID", "pools", "m", controls("kubevirt.io/v1", "VirtualMachine", "m", "recreated"), false},
		{"a VM of an earlier machine of that name", "pools", "stale", controls("kubevirt.io/v1", "VirtualMachine", "stale", "stale-uid"), false},
		{"a MacMachine of another group", "evil", "fake", controls("kubevirt.io/v1", "VirtualMachine", "fake", "fake-uid"), false},
		{"a VM that is gone", "pools", "gone", controls("kubevirt.io/v1", "VirtualMachine", "gone", "gone-uid"), false},
		{"another VM pointed at the machine", "pools", "hog", controls("kubevirt.io/v1", "VirtualMachine", "hog", "hog-uid"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: tc.ns, Name: tc.vmi,
				Labels: map[string]string{macvirtv1alpha1.LabelMachine: "m"}, OwnerReferences: tc.owners}}
			got, err := r.madeByMacvirt(context.Background(), v, map[types.UID]bool{})
			if err != nil || got != tc.want {
				t.Fatalf("madeByMacvirt = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
