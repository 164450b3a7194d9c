//go:build !darwin

package main

import (
	"errors"

	"github.com/macvirt/macvirt/internal/agent"
)

// newPlatform: the agent runs in macOS only; on other systems its logic is
// exercised by internal/agent's tests.
func newPlatform() (agent.Platform, error) {
	return nil, errors.New("macvirt-agent runs inside macOS only")
}
