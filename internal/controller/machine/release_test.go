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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// A Ready machine whose claim was released under reclaimPolicy Delete is
// deleted; the reconcile that deletes it reads neither its class nor its
// VM, and must not report what it did not read (the class exists).
func TestAReleasedMachineIsNotSaidToMissItsClass(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
	ready := metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
		Message: "macOS is up and its guest agent answers", LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}
	upToDate := metav1.Condition{Type: macvirtv1alpha1.ConditionClassUpToDate, Status: metav1.ConditionTrue, Reason: "UpToDate",
		Message: `MacClass "sonoma" is at revision 1, the machine's`, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "team-ios", UID: "machine-uid",
			Finalizers:  []string{macvirtv1alpha1.MachineFinalizer},
			Annotations: map[string]string{macvirtv1alpha1.AnnotationReclaimPolicy: string(macvirtv1alpha1.ReclaimDelete)}},
		Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: "1",
			ClaimRef: &macvirtv1alpha1.ObjectRef{Namespace: "team-ios", Name: "ci-1", UID: "claim-uid"}},
		Status: macvirtv1alpha1.MacMachineStatus{Phase: macvirtv1alpha1.MachineReady,
			Conditions: []metav1.Condition{ready, upToDate}},
	}
	c := controllertest.FakeClient(t, class, m)
	rec := events.NewFakeRecorder(16)
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(now)}

	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got := &macvirtv1alpha1.MacMachine{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatalf("the machine went at once; its finalizer should hold it for the graceful stop: %v", err)
	}
	if got.DeletionTimestamp.IsZero() {
		t.Fatal("the released machine was not deleted")
	}
	evs := controllertest.Events(rec)
	if !strings.Contains(evs, "Released") {
		t.Errorf("events:\n%s\nwant the Released event", evs)
	}
	for _, word := range []string{macvirtv1alpha1.ReasonClassNotFound, "does not exist"} {
		if strings.Contains(evs, word) {
			t.Errorf("events:\n%s\nsay %q of a class that exists", evs, word)
		}
	}
	for _, ct := range []string{macvirtv1alpha1.ConditionReady, macvirtv1alpha1.ConditionClassUpToDate} {
		if c := meta.FindStatusCondition(got.Status.Conditions, ct); c == nil || c.Reason == macvirtv1alpha1.ReasonClassNotFound {
			t.Errorf("condition %s = %+v; want what was known before the release, not a missing class", ct, c)
		}
	}
	if got.Status.Phase == macvirtv1alpha1.MachinePending {
		t.Errorf("phase %s: a released machine is not waiting for anything", got.Status.Phase)
	}
}
