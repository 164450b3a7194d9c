//go:build !darwin

package main

import (
	"errors"

	"github.com/macvirt/macvirt/internal/guestagent"
)

// newPlatform: the agent runs in macOS only; on other systems its logic is
// exercised by internal/guestagent's tests.
func newPlatform() (guestagent.Platform, error) {
	return nil, errors.New("macvirt-agent runs inside macOS only")
}
