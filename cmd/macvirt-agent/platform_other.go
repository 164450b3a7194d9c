//go:build !darwin

package main

import (
	"errors"

	"github.com/macvirt/macvirt/internal/guestagent/agent"
)

// newPlatform: the agent runs in macOS only; on other systems its logic is
// exercised by internal/guestagent/agent's tests.
func newPlatform() (agent.Platform, error) {
	return nil, errors.New("macvirt-agent runs inside macOS only")
}
