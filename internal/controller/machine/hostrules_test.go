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

package machine

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

func TestARefusedHostRulesPatchIsAWarningAndStopsNothing(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	c := fake.NewClientBuilder().WithScheme(controllertest.Scheme(t)).WithObjects(vm).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return apierrors.NewForbidden(kubevirtv1.Resource("virtualmachines"), "m", errors.New("denied by policy no-template-edits"))
		},
	}).Build()
	rec := events.NewFakeRecorder(8)
	r := &Reconciler{Client: c, Recorder: rec}
	o := &machineObservation{Machine: &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "pools"}}, VM: vm}
	proceed, err := r.ensureHostRules(context.Background(), o)
	if !proceed || err != nil {
		t.Fatalf("ensureHostRules = %v, %v; want the chain to go on (stops and starts must not wait on it)", proceed, err)
	}
	if !hostRulesMissing(o.VM) {
		t.Fatal("the observation claims a template the API server refused")
	}
	want := `virtualmachines.kubevirt.io "m" is forbidden: denied by policy no-template-edits`
	if got := controllertest.Events(rec); !strings.Contains(got, "Warning "+macvirtv1alpha1.ReasonUpdateFailed) || !strings.Contains(got, want) {
		t.Fatalf("events:\n%s\nwant an UpdateFailed Warning in the API server's words", got)
	}
}
