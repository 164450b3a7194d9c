// Package gocmd builds the test wing's fake commands (faketart, the fake
// lume CLI) from their packages, as the tools they stand in for are
// installed: static binaries on PATH or at a path the caller gives.
package gocmd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build builds the command of package pkg as dir/name and returns its
// path; what names the command in the error.
func Build(pkg, dir, name, what string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg) //nolint:gosec,noctx // G204: the test wing's own packages.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w: %s", what, err, b)
	}
	return out, nil
}
