package class

import (
	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
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
	// report Ready, with CDI's words (sources.go).
	NotReady []string
	// Image is a refreshed image's state (image.go), set once its
	// DataImportCron was kept; ImageProblem says why it cannot be.
	Image        *macvirtv1alpha1.ClassImageStatus
	ImageProblem *base.Problem
	// SizeProblem: the system disk is smaller than the image snapshot.
	SizeProblem *base.Problem
	// StorageClass is the machines' storage class and CloneStrategy its
	// StorageProfile's clone strategy, empty when unknown.
	StorageClass  string
	CloneStrategy string
}
