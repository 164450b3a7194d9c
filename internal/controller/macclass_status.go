package controller

import (
	"strings"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// classScope is what one reconcile of a class read and decided.
type classScope struct {
	// Name is the class's name; Class is nil once the class is deleted,
	// when only its snapshots are left to tidy.
	Name  string
	Class *macvirtv1alpha1.MacClass
	// Revision is the class's current revision; empty once it is deleted.
	Revision string
	// SourcesChecked is set once the referenced sources were looked up;
	// Missing lists those that do not exist.
	SourcesChecked bool
	Missing        []string
	// NotReady lists the DataSources that exist but that CDI does not
	// report Ready, with CDI's words (macclass_disks.go).
	NotReady []string
}

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
	var p *problem
	if len(s.Missing) > 0 {
		p = &problem{macvirtv1alpha1.ReasonDataSourceMissing,
			"missing: " + strings.Join(s.Missing, ", ") + "; machines of this class cannot be provisioned until they exist"}
	}
	if p == nil {
		p = notReadyProblem(s.NotReady)
	}
	setSummaryConditions(&st.Conditions, class.Generation, p, "all referenced sources exist and CDI reports the DataSources Ready")
	return *st
}
