package runnerset

import (
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
)

// setScope is what one reconcile of a runner set read, decided and failed
// to do.
type setScope struct {
	// Scope is the runner core's part: claims, plan, what blocked (the
	// address, the credentials Secret, the class) and what failed.
	runnercore.Scope
	Set *macvirtv1alpha1.MacRunnerSet
	Key types.NamespacedName
	// Target and Credentials are GitHub's address and the set's
	// credentials, once read.
	Target      github.Scope
	Credentials *github.Credentials
	// Demand is what the set's listener learned from GitHub.
	Demand Demand
}
