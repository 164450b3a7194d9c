package class

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// computeClassStatus derives a class's status from a scope. Until the
// sources were checked it is the status as it was: a reconcile that failed
// early says nothing new.
func computeClassStatus(s *classScope) macvirtv1alpha1.MacClassStatus {
	class := s.Class
	st := class.Status.DeepCopy()
	if !s.SourcesChecked {
		return *st
	}
	st.ObservedGeneration = class.Generation
	st.Revision = s.Revision
	if class.Spec.Image.Refresh == nil || class.Spec.OnHosts() {
		st.Image = nil
	} else if s.Image != nil {
		st.Image = s.Image
	}
	st.CloneStrategy = s.CloneStrategy
	setFastClones(&st.Conditions, class.Generation, s)
	var p *base.Problem
	switch {
	case s.ImageProblem != nil:
		p = s.ImageProblem
	case s.SizeProblem != nil:
		p = s.SizeProblem
	case withImage(class, st.Image).ImageUnresolved():
		p = &base.Problem{Reason: macvirtv1alpha1.ReasonImageImporting, Message: fmt.Sprintf(
			"waiting for CDI's first import of the registry image (DataImportCron %s in the images namespace); machines of this class wait for it",
			ImportName(class.Name))}
	}
	if p == nil && len(s.Missing) > 0 {
		p = &base.Problem{Reason: macvirtv1alpha1.ReasonDataSourceMissing,
			Message: "missing: " + strings.Join(s.Missing, ", ") + "; machines of this class cannot be provisioned until they exist"}
	}
	if p == nil {
		p = notReadyProblem(s.NotReady)
	}
	base.SetSummaryConditions(&st.Conditions, class.Generation, p, "all referenced sources exist and CDI reports the DataSources Ready")
	return *st
}

// setFastClones says whether each machine's disk is a fast clone of the
// image (snapshot, CSI clone) or a full copy, from the StorageProfile of the
// machines' storage class.
func setFastClones(conds *[]metav1.Condition, generation int64, s *classScope) {
	c := metav1.Condition{Type: macvirtv1alpha1.ConditionFastClones, ObservedGeneration: generation}
	switch s.CloneStrategy {
	case string(cdiv1.CloneStrategySnapshot):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, macvirtv1alpha1.ReasonSnapshotClone,
			fmt.Sprintf("StorageClass %s clones by snapshot: each machine's disk is a snapshot restore of the image", s.StorageClass)
	case string(cdiv1.CloneStrategyCsiClone):
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, macvirtv1alpha1.ReasonCSIClone,
			fmt.Sprintf("StorageClass %s clones with its CSI driver", s.StorageClass)
	case string(cdiv1.CloneStrategyHostAssisted):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, macvirtv1alpha1.ReasonCopyOnly,
			fmt.Sprintf("StorageClass %s can only copy: every machine's disk is a full copy of the image, which takes minutes per machine "+
				"and its whole size in storage; a storage class with a VolumeSnapshotClass or CSI cloning clones in seconds (docs/storage.md)", s.StorageClass)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, macvirtv1alpha1.ReasonStorageProfileUnknown,
			"CDI reports no clone strategy for the machines' storage class "+quoteOr(s.StorageClass, "(no default StorageClass)")
	}
	meta.SetStatusCondition(conds, c)
}

func quoteOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
