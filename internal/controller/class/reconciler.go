package class

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reconciler records a class's revision, keeps a snapshot of every
// revision a machine still records, and checks what can be checked: that
// its DataSources and, for AppleSMC, its OSK Secret exist.
type Reconciler struct {
	client.Client
	// APIReader reads uncached: the OSK Secret (the operator watches no
	// Secrets) and the class snapshots, which only this controller writes.
	APIReader client.Reader
	// Namespace is the operator's namespace, where class snapshots are kept.
	Namespace string
	// ImagesNamespace keeps the DataImportCrons of refreshed images; empty:
	// refresh is not served.
	ImagesNamespace string
	ControllerName  string
}
