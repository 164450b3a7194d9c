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

package drain

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestObserveDrain(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	class := &macvirtv1alpha1.MacClass{}
	class.Spec.Lifecycle.DrainGracePeriod = &metav1.Duration{Duration: time.Hour}
	vmi := func(node string, phase kubevirtv1.VirtualMachineInstancePhase) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{}
		v.Status.EvacuationNodeName, v.Status.Phase = node, phase
		return v
	}
	machine := func(bound bool, drainingSince *time.Time) *macvirtv1alpha1.MacMachine {
		m := &macvirtv1alpha1.MacMachine{}
		if bound {
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team", Name: "c"}
		}
		if drainingSince != nil {
			meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionHostDraining,
				Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonEvacuationRequested, LastTransitionTime: metav1.NewTime(*drainingSince)})
		}
		return m
	}
	tenMinutesAgo, twoHoursAgo := now.Add(-10*time.Minute), now.Add(-2*time.Hour)
	for name, tc := range map[string]struct {
		o    Input
		want State
	}{
		"not marked":  {o: Input{Now: now, Class: class, Machine: machine(true, nil), VMI: vmi("", kubevirtv1.Running)}},
		"no instance": {o: Input{Now: now, Class: class, Machine: machine(true, &tenMinutesAgo)}},
		"an idle machine stops at once": {o: Input{Now: now, Class: class, Machine: machine(false, nil), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: State{Node: "mac-1", Since: now, Grace: time.Hour, Stop: true}},
		"a bound machine waits for its grace, counted from the first sight": {
			o:    Input{Now: now, Class: class, Machine: machine(true, &tenMinutesAgo), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: State{Node: "mac-1", Since: tenMinutesAgo, Grace: time.Hour, Bound: true, RecheckAfter: 50 * time.Minute}},
		"a bound machine stops once its grace is over": {
			o:    Input{Now: now, Class: class, Machine: machine(true, &twoHoursAgo), VMI: vmi("mac-1", kubevirtv1.Running)},
			want: State{Node: "mac-1", Since: twoHoursAgo, Grace: time.Hour, Bound: true, Stop: true}},
		"a finished instance no longer drains": {
			o: Input{Now: now, Class: class, Machine: machine(true, &twoHoursAgo), VMI: vmi("mac-1", kubevirtv1.Succeeded)}},
		"a deleting machine is stopped by its deletion": {
			o: Input{Now: now, Class: class, Deleting: true, Machine: machine(false, nil), VMI: vmi("mac-1", kubevirtv1.Running)}},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(Observe(tc.o)).To(Equal(tc.want))
		})
	}
}

func TestHostDrainingConditionAndWarning(t *testing.T) {
	g := NewWithT(t)
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var conds []metav1.Condition
	waiting := State{Node: "mac-1", Since: since, Grace: time.Hour, Bound: true, RecheckAfter: time.Hour}
	SetHostDraining(&conds, waiting, 1, since)
	c := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
	g.Expect(c).NotTo(BeNil())
	g.Expect(c.Reason).To(Equal(macvirtv1alpha1.ReasonEvacuationRequested))
	g.Expect(c.Message).To(ContainSubstring("until 2026-12-01T13:00:00Z (drainGracePeriod 1h0m0s)"))
	reason, note, ok := Warning(nil, conds)
	g.Expect(ok).To(BeTrue())
	g.Expect(reason).To(Equal(macvirtv1alpha1.ConditionHostDraining))
	g.Expect(note).To(Equal(c.Message))
	_, _, again := Warning(conds, conds)
	g.Expect(again).To(BeFalse(), "one event per transition")

	before := append([]metav1.Condition(nil), conds...)
	stopping := waiting
	stopping.Stop, stopping.RecheckAfter = true, 0
	SetHostDraining(&conds, stopping, 1, since.Add(2*time.Hour))
	c = meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)
	g.Expect(c.Reason).To(Equal(macvirtv1alpha1.ReasonDrainStop))
	g.Expect(c.LastTransitionTime.Time).To(Equal(since), "still True: the drain's start is kept")
	_, note, ok = Warning(before, conds)
	g.Expect(ok).To(BeTrue())
	g.Expect(note).To(ContainSubstring("shut down gracefully now"))

	SetHostDraining(&conds, State{}, 1, since.Add(3*time.Hour))
	g.Expect(meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionHostDraining)).To(BeNil())

	var claim []metav1.Condition
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "pool", Name: "m"}}
	m.Status.Conditions = before
	Mirror(&claim, m, 4)
	g.Expect(meta.FindStatusCondition(claim, macvirtv1alpha1.ConditionHostDraining).Message).To(HavePrefix("machine pool/m: node mac-1 is being drained"))
	Mirror(&claim, nil, 4)
	g.Expect(claim).To(BeEmpty())
}
