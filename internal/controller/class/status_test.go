package class

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestComputeClassStatus(t *testing.T) {
	class := func(mods ...func(*macvirtv1alpha1.MacClass)) *macvirtv1alpha1.MacClass {
		c := &macvirtv1alpha1.MacClass{}
		c.Name, c.Generation = "sonoma", 4
		for _, mod := range mods {
			mod(c)
		}
		return c
	}
	recorded := func(c *macvirtv1alpha1.MacClass) {
		c.Status = macvirtv1alpha1.MacClassStatus{ObservedGeneration: 3, Revision: "old", Conditions: []metav1.Condition{
			{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, ObservedGeneration: 3}}}
	}
	cases := map[string]struct {
		scope       classScope
		generation  int64
		revision    string
		ready       metav1.ConditionStatus
		reason      string
		stalled     metav1.ConditionStatus
		messageHas  string
		unchangedAs *macvirtv1alpha1.MacClassStatus
	}{
		"every source exists": {scope: classScope{Class: class(), Revision: "abc", SourcesChecked: true},
			generation: 4, revision: "abc", ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonAsExpected,
			stalled: metav1.ConditionFalse},
		"a source is missing": {scope: classScope{Class: class(), Revision: "abc", SourcesChecked: true,
			Missing: []string{"DataSource macvirt-images/sonoma", "OSK Secret macvirt-system/osk (not found)"}},
			generation: 4, revision: "abc", ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonDataSourceMissing,
			stalled: metav1.ConditionTrue, messageHas: "DataSource macvirt-images/sonoma, OSK Secret macvirt-system/osk (not found)"},
		"a DataSource has no source yet": {scope: classScope{Class: class(), Revision: "abc", SourcesChecked: true,
			NotReady: []string{"DataSource macvirt-images/sonoma (CDI reports Ready=False, NotFound: PVC not found)"}},
			generation: 4, revision: "abc", ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonDataSourceNotReady,
			stalled: metav1.ConditionTrue, messageHas: "PVC not found"},
		"a missing source is said before one not ready": {scope: classScope{Class: class(), Revision: "abc", SourcesChecked: true,
			Missing: []string{"DataSource macvirt-images/opencore"}, NotReady: []string{"DataSource macvirt-images/sonoma (x)"}},
			generation: 4, revision: "abc", ready: metav1.ConditionFalse, reason: macvirtv1alpha1.ReasonDataSourceMissing,
			stalled: metav1.ConditionTrue, messageHas: "DataSource macvirt-images/opencore"},
		"a new generation moves the revision": {scope: classScope{Class: class(recorded), Revision: "new", SourcesChecked: true},
			generation: 4, revision: "new", ready: metav1.ConditionTrue, reason: macvirtv1alpha1.ReasonAsExpected,
			stalled: metav1.ConditionFalse},
		"sources not checked: nothing new is said": {scope: classScope{Class: class(recorded), Revision: "new"},
			unchangedAs: &class(recorded).Status},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			given := tc.scope.Class.Status.DeepCopy()
			got := computeClassStatus(&tc.scope)
			if !equality.Semantic.DeepEqual(&tc.scope.Class.Status, given) {
				t.Errorf("computeClassStatus changed the class it was given")
			}
			if tc.unchangedAs != nil {
				if !equality.Semantic.DeepEqual(got, *tc.unchangedAs) {
					t.Errorf("status = %+v, want it unchanged: %+v", got, *tc.unchangedAs)
				}
				return
			}
			if got.ObservedGeneration != tc.generation || got.Revision != tc.revision {
				t.Errorf("observedGeneration, revision = %d, %q; want %d, %q", got.ObservedGeneration, got.Revision, tc.generation, tc.revision)
			}
			ready := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason || ready.ObservedGeneration != tc.generation {
				t.Errorf("Ready = %+v, want %s %s at generation %d", ready, tc.ready, tc.reason, tc.generation)
			} else if !strings.Contains(ready.Message, tc.messageHas) {
				t.Errorf("Ready message %q does not say %q", ready.Message, tc.messageHas)
			}
			if s := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionStalled); s == nil || s.Status != tc.stalled {
				t.Errorf("Stalled = %+v, want %s", s, tc.stalled)
			}
		})
	}
}
