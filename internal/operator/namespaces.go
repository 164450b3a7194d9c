package operator

import (
	"context"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/controller/base"
)

// ImagesNamespace creates the images namespace when it is missing, once
// the operator leads, so that administrators import golden images into a
// namespace the install made (docs/install.md); macvirt never deletes it.
// A namespace it cannot create is logged, not fatal: whoever installs may
// create it.
type ImagesNamespace struct {
	Client client.Client
	Name   string
	Log    logr.Logger
}

// Start implements manager.Runnable.
func (n *ImagesNamespace) Start(ctx context.Context) error {
	created, err := base.CreateNamespace(ctx, n.Client, n.Name, "the images namespace (--images-namespace)")
	switch {
	case err != nil:
		n.Log.Error(err, "cannot create the images namespace; create it before importing golden images", "namespace", n.Name)
	case created:
		n.Log.Info("created the images namespace", "namespace", n.Name)
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (n *ImagesNamespace) NeedLeaderElection() bool { return true }
