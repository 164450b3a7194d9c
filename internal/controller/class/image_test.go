package class

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

func refreshedClass() *macvirtv1alpha1.MacClass {
	c := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Generation: 1}}
	c.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://r.example.com/macos:14")}}
	c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 */6 * * *"}
	return c
}

func TestClassStatusOfARefreshedImage(t *testing.T) {
	class := refreshedClass()
	s := &classScope{Name: class.Name, Class: class, SourcesChecked: true,
		Image: &macvirtv1alpha1.ClassImageStatus{DataImportCron: "nightly-image", DataSource: "nightly-image"}}
	st := computeClassStatus(s)
	if ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady); ready.Reason != macvirtv1alpha1.ReasonImageImporting {
		t.Errorf("before the first import Ready = %+v, want ImageImporting", ready)
	}
	s.Image.Resolved = &macvirtv1alpha1.ResolvedImage{Kind: macvirtv1alpha1.ImagePublishedAsPVC, Namespace: "macvirt-images", Name: "nightly-image-aaaaaaaaaaaa"}
	s.Revision = revisionOf(class, s.Image)
	st = computeClassStatus(s)
	if !meta.IsStatusConditionTrue(st.Conditions, macvirtv1alpha1.ConditionReady) || st.Image.Resolved.Name != "nightly-image-aaaaaaaaaaaa" {
		t.Errorf("after the import: %+v", st)
	}
	resolved := class.DeepCopy()
	resolved.Status = st
	if render.ClassRevision(resolved) != st.Revision {
		t.Error("the revision others compute from the written status differs from the one the class recorded")
	}

	// A reconcile that never got to the import keeps what was resolved.
	class.Status = st
	kept := computeClassStatus(&classScope{Name: class.Name, Class: class, SourcesChecked: true, Revision: st.Revision})
	if kept.Image == nil || kept.Image.Resolved == nil {
		t.Error("a reconcile that did not look at the import dropped the resolved image, which would roll every pool")
	}
}

func TestFastClones(t *testing.T) {
	for strategy, want := range map[string]struct {
		status metav1.ConditionStatus
		reason string
	}{
		"snapshot":  {metav1.ConditionTrue, macvirtv1alpha1.ReasonSnapshotClone},
		"csi-clone": {metav1.ConditionTrue, macvirtv1alpha1.ReasonCSIClone},
		"copy":      {metav1.ConditionFalse, macvirtv1alpha1.ReasonCopyOnly},
		"":          {metav1.ConditionUnknown, macvirtv1alpha1.ReasonStorageProfileUnknown},
	} {
		var conds []metav1.Condition
		setFastClones(&conds, 1, &classScope{StorageClass: "standard", CloneStrategy: strategy})
		c := meta.FindStatusCondition(conds, macvirtv1alpha1.ConditionFastClones)
		if c.Status != want.status || c.Reason != want.reason {
			t.Errorf("strategy %q: FastClones = %s %s, want %s %s", strategy, c.Status, c.Reason, want.status, want.reason)
		}
	}
}
