/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// hostScheme knows what the host code reads and writes.
func hostScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{macvirtv1alpha1.AddToScheme, corev1.AddToScheme, kubevirtv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// drained reads every event the fake recorder holds.
func drained(rec *events.FakeRecorder) string {
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

func TestARefusedSlotsWriteIsSaidOnTheNodeInTheAPIServersWords(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mac-1", Labels: map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}}}
	b := fake.NewClientBuilder().WithScheme(hostScheme(t)).WithObjects(node).WithInterceptorFuncs(interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return apierrors.NewForbidden(corev1.Resource("nodes/status"), "mac-1", errors.New("a policy keeps nodes' status to their kubelet"))
		},
	})
	b.WithIndex(&kubevirtv1.VirtualMachineInstance{}, vmiNodeField, func(client.Object) []string { return nil })
	rec := events.NewFakeRecorder(8)
	r := &NodeSlotsReconciler{Client: b.Build(), Recorder: rec}
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "mac-1"}})
	want := `nodes/status "mac-1" is forbidden: a policy keeps nodes' status to their kubelet`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Reconcile = %v; want the refusal returned for a retry", err)
	}
	if got := drained(rec); !strings.Contains(got, "Warning SlotsNotAdvertised") || !strings.Contains(got, want) {
		t.Fatalf("events:\n%s\nwant a SlotsNotAdvertised Warning in the API server's words", got)
	}
}

func TestARefusedHostRulesPatchIsAWarningAndStopsNothing(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	c := fake.NewClientBuilder().WithScheme(hostScheme(t)).WithObjects(vm).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return apierrors.NewForbidden(kubevirtv1.Resource("virtualmachines"), "m", errors.New("denied by policy no-template-edits"))
		},
	}).Build()
	rec := events.NewFakeRecorder(8)
	r := &MacMachineReconciler{Client: c, Recorder: rec}
	o := &machineObservation{Machine: &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"}}, VM: vm}
	proceed, err := r.ensureHostRules(context.Background(), o)
	if !proceed || err != nil {
		t.Fatalf("ensureHostRules = %v, %v; want the chain to go on (stops and starts must not wait on it)", proceed, err)
	}
	if !hostRulesMissing(o.VM) {
		t.Fatal("the observation claims a template the API server refused")
	}
	want := `virtualmachines.kubevirt.io "m" is forbidden: denied by policy no-template-edits`
	if got := drained(rec); !strings.Contains(got, "Warning "+macvirtv1alpha1.ReasonUpdateFailed) || !strings.Contains(got, want) {
		t.Fatalf("events:\n%s\nwant an UpdateFailed Warning in the API server's words", got)
	}
}

func TestAnUnreadableSlotReportIsSaidOnThePool(t *testing.T) {
	waiting := macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "p-2", Namespace: "pools"}}
	waiting.Status.Conditions = []metav1.Condition{{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: macvirtv1alpha1.ReasonMacOSSlotsExhausted}}
	c := fake.NewClientBuilder().WithScheme(hostScheme(t)).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewForbidden(corev1.Resource("nodes"), "", errors.New("cannot list nodes at the cluster scope"))
		},
	}).Build()
	r := &MacPoolReconciler{Client: c}
	s := &poolScope{Pool: &macvirtv1alpha1.MacPool{}, Machines: []macvirtv1alpha1.MacMachine{waiting}}
	if proceed, err := r.observeSlots(context.Background(), s); !proceed || err != nil {
		t.Fatalf("observeSlots = %v, %v; want the pool to go on", proceed, err)
	}
	st := computePoolStatus(s)
	var ready *metav1.Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == macvirtv1alpha1.ConditionReady {
			ready = &st.Conditions[i]
		}
	}
	if ready == nil || ready.Reason != macvirtv1alpha1.ReasonMacOSSlotsExhausted ||
		!strings.Contains(ready.Message, `could not be read: listing Apple nodes: nodes is forbidden: cannot list nodes at the cluster scope`) {
		t.Fatalf("Ready = %+v; want MacOSSlotsExhausted saying why the free slots are unknown, in the API server's words", ready)
	}
}
