package claim

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// findBound only reads, whatever it finds: the writes the binding protocol
// needs (the machine's side of a reservation, a machine made on demand, an
// orphan deleted) are completeBinding's and deleteOrphans', in that order.
func TestFindBoundOnlyReadsAndItsWritesAreTheNextSteps(t *testing.T) {
	claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: "team", UID: "claim-uid"}}
	boundTo := func(m *macvirtv1alpha1.MacMachine) {
		m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
		m.OwnerReferences = nil
	}
	named := func(name string) func(*macvirtv1alpha1.MacMachine) {
		return func(m *macvirtv1alpha1.MacMachine) { m.Name, m.UID = name, types.UID("uid-"+name) }
	}
	kept, orphan := trustMachine(named("ci-0"), boundTo), trustMachine(named("ci-1"), boundTo)
	free := trustMachine(named("ci-2"))
	refTo := func(m *macvirtv1alpha1.MacMachine) *macvirtv1alpha1.ObjectRef {
		return &macvirtv1alpha1.ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	}
	for name, tc := range map[string]struct {
		spec     macvirtv1alpha1.MacClaimSpec
		ref      *macvirtv1alpha1.ObjectRef
		bound    string // the Bound condition's reason; True for Bound
		machines []client.Object
		// What findBound found: the machine's name and the orphans'.
		found   string
		orphans []string
		// The writes of completeBinding and deleteOrphans, in order, and
		// the claim's machine after them.
		writes  []string
		machine string
	}{
		"bound, and a second machine another operator bound": {spec: macvirtv1alpha1.MacClaimSpec{PoolName: "ci"}, ref: refTo(kept),
			bound: macvirtv1alpha1.ReasonBound, machines: []client.Object{kept, orphan},
			found: "ci-0", orphans: []string{"ci-1"}, writes: []string{"delete MacMachine"}, machine: "ci-0"},
		"bound, as recorded": {spec: macvirtv1alpha1.MacClaimSpec{PoolName: "ci"}, ref: refTo(kept),
			bound: macvirtv1alpha1.ReasonBound, machines: []client.Object{kept}, found: "ci-0", machine: "ci-0"},
		"a reservation whose machine's side is not written yet": {spec: macvirtv1alpha1.MacClaimSpec{PoolName: "ci"}, ref: refTo(free),
			bound: macvirtv1alpha1.ReasonBinding, machines: []client.Object{free}, writes: []string{"update MacMachine"}, machine: "ci-2"},
		"committed to a machine made on demand": {spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma"},
			bound: macvirtv1alpha1.ReasonBinding, writes: []string{"create MacMachine"}, machine: onDemandName(claim)},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c0 := claim.DeepCopy()
			c0.Spec, c0.Status.MachineRef = tc.spec, tc.ref
			status := metav1.ConditionFalse
			if tc.bound == macvirtv1alpha1.ReasonBound {
				status = metav1.ConditionTrue
			}
			meta.SetStatusCondition(&c0.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionBound, Status: status, Reason: tc.bound})
			class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma"}}
			class.Spec.Tenancy.OnDemand = ptr.To(true)
			objs := append([]client.Object{class, trustPool(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, c0}, tc.machines...)
			c := controllertest.FakeClient(t, objs...)
			w := &writeLog{Client: c}
			r := &Reconciler{Client: w, APIReader: c, Clock: clock.RealClock{}}
			s := &claimScope{claim: &macvirtv1alpha1.MacClaim{}}
			if err := c.Get(ctx, client.ObjectKeyFromObject(c0), s.claim); err != nil {
				t.Fatal(err)
			}

			if proceed, err := r.findBound(ctx, s); !proceed || err != nil {
				t.Fatalf("findBound = %v, %v; want it to go on", proceed, err)
			}
			if got := w.take(); len(got) != 0 {
				t.Errorf("findBound wrote %q; it only reads", got)
			}
			if got := machineName(s.machine); got != tc.found {
				t.Errorf("findBound found machine %q, want %q", got, tc.found)
			}
			var orphans []string
			for _, m := range s.orphans {
				orphans = append(orphans, m.Name)
			}
			if !slices.Equal(orphans, tc.orphans) {
				t.Errorf("findBound found orphans %q, want %q", orphans, tc.orphans)
			}

			for _, step := range []func(context.Context, *claimScope) (bool, error){r.completeBinding, r.deleteOrphans} {
				if proceed, err := step(ctx, s); !proceed || err != nil {
					t.Fatalf("a step after findBound = %v, %v; want it to go on", proceed, err)
				}
			}
			if got := w.take(); !slices.Equal(got, tc.writes) {
				t.Errorf("completeBinding and deleteOrphans wrote %q, want %q", got, tc.writes)
			}
			if got := machineName(s.machine); got != tc.machine {
				t.Errorf("the claim's machine is %q, want %q", got, tc.machine)
			}
		})
	}
}

func machineName(m *macvirtv1alpha1.MacMachine) string {
	if m == nil {
		return ""
	}
	return m.Name
}
