package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The agent runs on Apple-silicon Macs and is built here: it must build
// for darwin/arm64 without cgo, with every package it imports.
func TestBuildsForAppleSiliconWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the agent; make test runs it")
	}
	out := filepath.Join(t.TempDir(), "macvirt-host-agent")
	cmd := exec.Command("go", "build", "-o", out, ".") //nolint:gosec,noctx // the test's own build into its temp dir.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=darwin", "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for darwin/arm64: %v\n%s", err, b)
	}
	f, err := os.ReadFile(out) //nolint:gosec // the binary just built.
	if err != nil {
		t.Fatal(err)
	}
	// A Mach-O 64-bit binary starts with 0xfeedfacf, little-endian.
	if len(f) < 8 || f[0] != 0xcf || f[1] != 0xfa || f[2] != 0xed || f[3] != 0xfe {
		t.Fatalf("not a 64-bit Mach-O binary: % x", f[:8])
	}
	// CPU type arm64 is 0x0100000c.
	if f[4] != 0x0c || f[7] != 0x01 {
		t.Fatalf("not built for arm64: cpu type % x", f[4:8])
	}
}
