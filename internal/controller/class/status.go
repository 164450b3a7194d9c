package class

import (
	"strings"

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
	var p *base.Problem
	if len(s.Missing) > 0 {
		p = &base.Problem{Reason: macvirtv1alpha1.ReasonDataSourceMissing,
			Message: "missing: " + strings.Join(s.Missing, ", ") + "; machines of this class cannot be provisioned until they exist"}
	}
	if p == nil {
		p = notReadyProblem(s.NotReady)
	}
	base.SetSummaryConditions(&st.Conditions, class.Generation, p, "all referenced sources exist and CDI reports the DataSources Ready")
	return *st
}
