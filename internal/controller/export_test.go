package controller

import (
	"context"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// EnsureAgentConfig runs only the agent-token step on m, so a test can
// interleave two writers exactly as a stale cache or a second replica would.
func (r *MacMachineReconciler) EnsureAgentConfig(ctx context.Context, m *macvirtv1alpha1.MacMachine) (bool, error) {
	return r.ensureAgentConfig(ctx, &machineObservation{Machine: m})
}
