package classhistory

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
)

func TestNamesFitTheirLimits(t *testing.T) {
	long := strings.Repeat("sonoma.", 36) + "x" // 253 characters, a valid DNS subdomain
	other := long[:252] + "y"
	for _, class := range []string{"sonoma", long, other, strings.Repeat("a", 62) + "-b"} {
		name := Name(class, "0123456789")
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("Name(%q) = %q: %v", class, name, errs)
		}
		if !strings.HasSuffix(name, "-0123456789") {
			t.Errorf("Name(%q) = %q, want the revision at its end", class, name)
		}
		if errs := validation.IsValidLabelValue(ClassLabel(class)); len(errs) > 0 {
			t.Errorf("ClassLabel(%q) = %q: %v", class, ClassLabel(class), errs)
		}
	}
	if got := Name("sonoma", "0123456789"); got != "sonoma-0123456789" {
		t.Errorf("Name of a short class = %q, want sonoma-0123456789", got)
	}
	if Name(long, "0123456789") == Name(other, "0123456789") || ClassLabel(long) == ClassLabel(other) {
		t.Errorf("two long class names sharing a prefix got the same snapshot name or label")
	}
}

func sonoma(cpu int32) *macvirtv1alpha1.MacClass {
	memory := resource.MustParse("16Gi")
	class := &macvirtv1alpha1.MacClass{}
	class.Name, class.Generation = "sonoma", 7
	class.Spec.Resources = macvirtv1alpha1.ClassResources{CPU: cpu, Memory: &memory}
	class.Spec.Description = "Xcode 16"
	return class
}

func TestSnapshotKeepsTheClassSpec(t *testing.T) {
	class := sonoma(8)
	snap, err := New("macvirt-system", class, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Namespace != "macvirt-system" || snap.Revision != 7 || len(snap.OwnerReferences) != 0 ||
		snap.Labels[macvirtv1alpha1.LabelClass] != "sonoma" || snap.Labels[macvirtv1alpha1.LabelClassRevision] != "abc" {
		t.Errorf("snapshot = %+v, want it in macvirt-system, revision 7, labelled sonoma/abc, owned by nothing", snap.ObjectMeta)
	}
	kept, err := Decode("sonoma", snap)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Name != "sonoma" || kept.Spec.Resources.CPU != 8 || kept.Spec.Resources.Memory.Cmp(*class.Spec.Resources.Memory) != 0 ||
		kept.Spec.Description != "Xcode 16" {
		t.Errorf("class from snapshot = %+v, want the spec it was made of", kept)
	}
	if !Holds(snap, class) {
		t.Errorf("Holds = false for the class it was made of")
	}
	class.Spec.Description = "Xcode 16.1"
	if Holds(snap, class) {
		t.Errorf("Holds = true after the class spec changed")
	}
}

func TestResolve(t *testing.T) {
	old, current := sonoma(4), sonoma(8)
	oldRev, currentRev := render.ClassRevision(old), render.ClassRevision(current)
	snap, err := New("macvirt-system", old, oldRev)
	if err != nil {
		t.Fatal(err)
	}
	machine := func(rev string) *macvirtv1alpha1.MacMachine {
		m := &macvirtv1alpha1.MacMachine{}
		m.Spec.ClassName, m.Spec.ClassRevision = "sonoma", rev
		return m
	}
	cases := map[string]struct {
		objects   []client.Object
		machine   *macvirtv1alpha1.MacMachine
		cpu       int32 // of the resolved class; 0 for none
		kept      bool
		liveRev   string
		noHistory bool
	}{
		"the class at the machine's revision":         {objects: []client.Object{current, snap}, machine: machine(currentRev), cpu: 8, liveRev: currentRev},
		"a machine that records no revision yet":      {objects: []client.Object{current}, machine: machine(""), cpu: 8, liveRev: currentRev},
		"the class changed: the machine's revision":   {objects: []client.Object{current, snap}, machine: machine(oldRev), cpu: 4, kept: true, liveRev: currentRev},
		"the class deleted: the machine's revision":   {objects: []client.Object{snap}, machine: machine(oldRev), cpu: 4, kept: true},
		"the class changed and the revision not kept": {objects: []client.Object{current}, machine: machine(oldRev), cpu: 8, liveRev: currentRev},
		"the class deleted and the revision not kept": {objects: nil, machine: machine(oldRev)},
		"no class, no revision":                       {objects: []client.Object{snap}, machine: machine("")},
		"without history, the class as it is":         {objects: []client.Object{current, snap}, machine: machine(oldRev), cpu: 8, liveRev: currentRev, noHistory: true},
	}
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs := make([]client.Object, 0, len(tc.objects))
			for _, o := range tc.objects {
				objs = append(objs, o.DeepCopyObject().(client.Object))
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
			r := Resolver{Classes: c, Snapshots: c, Namespace: "macvirt-system"}
			if tc.noHistory {
				r.Snapshots = nil
			}
			got, err := r.Resolve(context.Background(), tc.machine)
			if err != nil {
				t.Fatal(err)
			}
			cpu := int32(0)
			if got.Class != nil {
				cpu = got.Class.Spec.Resources.CPU
			}
			if cpu != tc.cpu || got.Kept != tc.kept || got.LiveRevision != tc.liveRev || (got.Live == nil) != (tc.liveRev == "") {
				t.Errorf("resolved class with cpu %d, kept %t, live revision %q (live %t); want cpu %d, kept %t, live revision %q",
					cpu, got.Kept, got.LiveRevision, got.Live != nil, tc.cpu, tc.kept, tc.liveRev)
			}
		})
	}
}
