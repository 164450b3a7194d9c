package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func TestSnapshotNamesFitTheirLimits(t *testing.T) {
	long := strings.Repeat("sonoma.", 36) + "x" // 253 characters, a valid DNS subdomain
	other := long[:252] + "y"
	for _, class := range []string{"sonoma", long, other, strings.Repeat("a", 62) + "-b"} {
		name := snapshotName(class, "0123456789")
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("snapshotName(%q) = %q: %v", class, name, errs)
		}
		if !strings.HasSuffix(name, "-0123456789") {
			t.Errorf("snapshotName(%q) = %q, want the revision at its end", class, name)
		}
		if errs := validation.IsValidLabelValue(classLabelValue(class)); len(errs) > 0 {
			t.Errorf("classLabelValue(%q) = %q: %v", class, classLabelValue(class), errs)
		}
	}
	if got := snapshotName("sonoma", "0123456789"); got != "sonoma-0123456789" {
		t.Errorf("snapshotName of a short class = %q, want sonoma-0123456789", got)
	}
	if snapshotName(long, "0123456789") == snapshotName(other, "0123456789") || classLabelValue(long) == classLabelValue(other) {
		t.Errorf("two long class names sharing a prefix got the same snapshot name or label")
	}
}

func TestSnapshotKeepsTheClassSpec(t *testing.T) {
	memory := resource.MustParse("16Gi")
	class := &macvirtv1alpha1.MacClass{}
	class.Name, class.Generation = "sonoma", 7
	class.Spec.Resources = macvirtv1alpha1.ClassResources{CPU: 8, Memory: &memory}
	class.Spec.Description = "Xcode 16"
	snap, err := newSnapshot("macvirt-system", class, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Namespace != "macvirt-system" || snap.Revision != 7 || len(snap.OwnerReferences) != 0 ||
		snap.Labels[macvirtv1alpha1.LabelClass] != "sonoma" || snap.Labels[macvirtv1alpha1.LabelClassRevision] != "abc" {
		t.Errorf("snapshot = %+v, want it in macvirt-system, revision 7, labelled sonoma/abc, owned by nothing", snap.ObjectMeta)
	}
	kept, err := classFromSnapshot("sonoma", snap)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Name != "sonoma" || kept.Spec.Resources.CPU != 8 || kept.Spec.Resources.Memory.Cmp(memory) != 0 || kept.Spec.Description != "Xcode 16" {
		t.Errorf("class from snapshot = %+v, want the spec it was made of", kept)
	}
	if !snapshotHolds(snap, class) {
		t.Errorf("snapshotHolds = false for the class it was made of")
	}
	class.Spec.Description = "Xcode 16.1"
	if snapshotHolds(snap, class) {
		t.Errorf("snapshotHolds = true after the class spec changed")
	}
}
