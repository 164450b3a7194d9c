package runnerset

import (
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/github"
)

// setScope is what one reconcile of a runner set read, decided and failed
// to do.
type setScope struct {
	Set *macvirtv1alpha1.MacRunnerSet
	Key types.NamespacedName
	// Scope and Credentials are GitHub's address and the set's credentials,
	// once read.
	Scope       github.Scope
	Credentials *github.Credentials
	// Blocked is a problem that needs a human: the address, the
	// credentials Secret, the class.
	Blocked *base.Problem
	// Demand is what the set's listener learned from GitHub.
	Demand Demand
	// Claims are the set's runners' claims.
	Claims []macvirtv1alpha1.MacClaim
	Plan   runnerPlan
	// Failed is the first write or GitHub call of this reconcile that
	// failed, in its own words.
	Failed *base.Problem
	// Pool is the set's own warm pool, when it has one.
	Pool *macvirtv1alpha1.MacPool
}

// fail records the first failure of the reconcile.
func (s *setScope) fail(reason, msg string) {
	if s.Failed == nil {
		s.Failed = &base.Problem{Reason: reason, Message: msg}
	}
}

// claim is the scope's claim named name.
func (s *setScope) claim(name string) *macvirtv1alpha1.MacClaim {
	for i := range s.Claims {
		if s.Claims[i].Name == name {
			return &s.Claims[i]
		}
	}
	return nil
}

// decision is the plan's decision about the runner named name.
func (s *setScope) decision(name string) *runnerDecision {
	for i := range s.Plan.Runners {
		if s.Plan.Runners[i].Name == name {
			return &s.Plan.Runners[i]
		}
	}
	return nil
}
