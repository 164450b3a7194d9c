package machine

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
	"github.com/macvirt/macvirt/internal/controller/index"
)

func TestChoosePlacement(t *testing.T) {
	for name, tc := range map[string]struct {
		hosts    []hostCandidate
		want     string
		wantWhy  []string
		wantNone bool
	}{
		"the host with the most free slots": {
			hosts: []hostCandidate{{Name: "a", Slots: 2, Placed: 1}, {Name: "b", Slots: 2}},
			want:  "b",
		},
		"a host with the image cached comes first": {
			hosts: []hostCandidate{{Name: "a", Slots: 2, Placed: 1, Cached: true}, {Name: "b", Slots: 2}},
			want:  "a",
		},
		"with free slots alike, the host with fewer machines (suspended ones hold no slot)": {
			hosts: []hostCandidate{{Name: "a", Slots: 2, Machines: 4}, {Name: "b", Slots: 2, Machines: 2}},
			want:  "b",
		},
		"ties go by name": {
			hosts: []hostCandidate{{Name: "b", Slots: 2}, {Name: "a", Slots: 2}},
			want:  "a",
		},
		"a full host is passed over": {
			hosts: []hostCandidate{{Name: "a", Slots: 2, Placed: 2}, {Name: "b", Slots: 2, Placed: 1}},
			want:  "b",
		},
		"a refused host is passed over, whatever its slots": {
			hosts: []hostCandidate{{Name: "a", Slots: 2, Refused: "cordoned"}, {Name: "b", Slots: 2, Placed: 1}},
			want:  "b",
		},
		"with every host full, the machine waits and says why for each": {
			hosts:    []hostCandidate{{Name: "a", Slots: 2, Placed: 2}, {Name: "b", Slots: 2, Refused: "not Ready (HostLost: gone)"}},
			wantNone: true,
			wantWhy:  []string{"a: full (2 of 2 slots taken)", "b: not Ready (HostLost: gone)", "waits for a free slot"},
		},
		"with no host at all, it says how to get one": {
			wantNone: true,
			wantWhy:  []string{"no MacHost matches", "hostSelector"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, problem := choosePlacement(tc.hosts)
			if tc.wantNone {
				if problem == nil || got != "" {
					t.Fatalf("placed on %q; want it to wait", got)
				}
				if problem.Reason != macvirtv1alpha1.ReasonNoHostAvailable {
					t.Errorf("reason %s; want %s", problem.Reason, macvirtv1alpha1.ReasonNoHostAvailable)
				}
				for _, w := range tc.wantWhy {
					if !strings.Contains(problem.Message, w) {
						t.Errorf("message %q lacks %q", problem.Message, w)
					}
				}
				return
			}
			if problem != nil || got != tc.want {
				t.Fatalf("placed on %q (%v); want %q", got, problem, tc.want)
			}
		})
	}
}

func TestHostRefusal(t *testing.T) {
	cond := func(t, status, reason string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: "m"}
	}
	for name, tc := range map[string]struct {
		conds         []metav1.Condition
		generation    int64
		unschedulable bool
		refused       bool
	}{
		"cordoned a moment ago, its conditions not yet recomputed": {conds: []metav1.Condition{cond("Ready", "True", "AsExpected"),
			cond("Schedulable", "True", "AsExpected")}, unschedulable: true, refused: true},
		"changed since the operator looked": {conds: []metav1.Condition{cond("Ready", "True", "AsExpected"),
			cond("Schedulable", "True", "AsExpected")}, generation: 2, refused: true},
		"not looked at yet":       {refused: true},
		"Ready and Schedulable":   {conds: []metav1.Condition{cond("Ready", "True", "AsExpected"), cond("Schedulable", "True", "AsExpected")}},
		"only full: counted here": {conds: []metav1.Condition{cond("Ready", "True", "AsExpected"), cond("Schedulable", "False", macvirtv1alpha1.ReasonHostFull)}},
		"cordoned":                {conds: []metav1.Condition{cond("Ready", "True", "AsExpected"), cond("Schedulable", "False", macvirtv1alpha1.ReasonHostCordoned)}, refused: true},
		"lost":                    {conds: []metav1.Condition{cond("Ready", "Unknown", macvirtv1alpha1.ReasonHostLost), cond("Schedulable", "False", macvirtv1alpha1.ReasonHostLost)}, refused: true},
		"stuck":                   {conds: []metav1.Condition{cond("Ready", "False", macvirtv1alpha1.HostConditionVMLimitStuck)}, refused: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Generation: tc.generation},
				Spec: macvirtv1alpha1.MacHostSpec{Unschedulable: tc.unschedulable}, Status: macvirtv1alpha1.MacHostStatus{Conditions: tc.conds}}
			if got := hostRefusal(h); (got != "") != tc.refused {
				t.Fatalf("hostRefusal = %q; want refused: %v", got, tc.refused)
			}
		})
	}
}

// A placement the cache does not show yet takes its slot: a second machine
// placed at once goes to the other host, never past a host's slots.
func TestPlacementsInFlightTakeTheirSlot(t *testing.T) {
	ctx := context.Background()
	host := func(name string) *macvirtv1alpha1.MacHost {
		return &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: macvirtv1alpha1.MacHostStatus{Agent: &macvirtv1alpha1.HostAgentReport{Slots: 1}, Conditions: []metav1.Condition{
				{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"},
				{Type: macvirtv1alpha1.HostConditionSchedulable, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	}
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "arm"}, Spec: macvirtv1alpha1.MacClassSpec{Runtime: macvirtv1alpha1.RuntimeVirtualization}}
	first := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m-0", UID: "uid-0"}}
	second := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m-1", UID: "uid-1"}}
	c := controllertest.FakeClient(t, host("a"), host("b"), first, second)
	// The cache lags: reads see machines as they were before placement.
	r := &Reconciler{Client: lagging{Client: c}}
	for _, m := range []*macvirtv1alpha1.MacMachine{first, second} {
		o := &machineObservation{Machine: m.DeepCopy(), Class: class}
		if proceed, err := r.ensurePlacement(ctx, o); err != nil || !proceed {
			t.Fatalf("placing %s: proceed %v, %v (%v)", m.Name, proceed, err, o.Unplaced)
		}
		*m = *o.Machine
	}
	if first.Spec.HostName == second.Spec.HostName {
		t.Fatalf("both machines placed on %s, which has one slot", first.Spec.HostName)
	}
	third := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m-2", UID: "uid-2"}}
	if err := c.Create(ctx, third); err != nil {
		t.Fatal(err)
	}
	o := &machineObservation{Machine: third, Class: class}
	if proceed, err := r.ensurePlacement(ctx, o); err != nil || proceed || o.Unplaced == nil {
		t.Fatalf("a third machine was placed (proceed %v, %v) on %q; want it to wait", proceed, err, third.Spec.HostName)
	}
}

// lagging is a client whose reads of machines never show a hostName, as a
// cache that has not caught up with the placements.
type lagging struct{ client.Client }

func (l lagging) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*macvirtv1alpha1.MacMachineList); ok {
		for _, o := range opts {
			if f, ok := o.(client.MatchingFields); ok && f[index.MachineHost] != "" {
				list.(*macvirtv1alpha1.MacMachineList).Items = nil
				return nil
			}
		}
	}
	return l.Client.List(ctx, list, opts...)
}

func (l lagging) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if m, ok := obj.(*macvirtv1alpha1.MacMachine); ok {
		m.Spec.HostName = ""
	}
	return nil
}

// A class's hostSelector is obeyed: a host it does not select is never
// chosen, even with more free slots and a name that sorts first; VMs a host
// runs that no machine accounts for take its slots.
func TestPlacementObeysTheSelectorAndRunningVMs(t *testing.T) {
	ctx := context.Background()
	host := func(name string, labels map[string]string, slots, running int32) *macvirtv1alpha1.MacHost {
		return &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status: macvirtv1alpha1.MacHostStatus{Agent: &macvirtv1alpha1.HostAgentReport{Slots: slots, RunningVMs: running}, Conditions: []metav1.Condition{
				{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"},
				{Type: macvirtv1alpha1.HostConditionSchedulable, Status: metav1.ConditionTrue, Reason: "AsExpected"}}}}
	}
	class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "arm"}, Spec: macvirtv1alpha1.MacClassSpec{
		Runtime:   macvirtv1alpha1.RuntimeVirtualization,
		Placement: macvirtv1alpha1.PlacementSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ios"}}}}}
	m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "p", Name: "m-0", UID: "uid-0"}}
	c := controllertest.FakeClient(t, host("a-unselected", nil, 8, 0), host("b-busy", map[string]string{"team": "ios"}, 2, 2),
		host("c-ios", map[string]string{"team": "ios"}, 2, 0), m)
	r := &Reconciler{Client: c}
	o := &machineObservation{Machine: m.DeepCopy(), Class: class}
	if proceed, err := r.ensurePlacement(ctx, o); err != nil || !proceed {
		t.Fatalf("placing: proceed %v, %v (%v)", proceed, err, o.Unplaced)
	}
	if got := o.Machine.Spec.HostName; got != "c-ios" {
		t.Fatalf("placed on %q; want c-ios (a-unselected is not selected, b-busy runs two VMs of its two slots)", got)
	}
}
