/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package build

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/test/infrastructure/gocmd"
)

// Package is the import path of the faketart command.
const Package = "github.com/macvirt/macvirt/test/infrastructure/faketart"

// KnobsFile and CommandsFile are the fake's files in TART_HOME.
const (
	// KnobsFile holds Knobs as JSON.
	KnobsFile = "fake.json"
	// CommandsFile gets one line per invocation: the arguments joined by
	// spaces.
	CommandsFile = "commands.log"
	// LastExitFile, in a VM's directory, says how its last run ended:
	// "shutdown" (the guest shut down), "forced" (SIGINT), "suspended"
	// (its memory saved on SIGUSR1) or "killed" (a SIGUSR1 it could not
	// save on: tart exits, ending the VM abruptly).
	LastExitFile = "last-exit"
)

// Files in a VM's directory.
const (
	// ConfigFile is the VM's configuration, tart's config.json; its
	// "macAddress" and "ecid" are tart's.
	ConfigFile = "config.json"
	// StateFile is the VM's saved memory, tart's state.vzvmsave: a sparse
	// file as large as the VM's memory.
	StateFile = "state.vzvmsave"
	// BootIDFile holds the guest's boot id: new on every cold boot, kept
	// by a restore from StateFile.
	BootIDFile = "boot-id"
)

// HaltFile is the file, in a VM's directory, that tells its macOS to shut
// down from inside (its guest agent's shutdown -h now); HaltGuest writes it.
const HaltFile = "guest-halt"

// HaltGuest shuts the fake VM's macOS down from inside, as its guest agent
// does when its host asks.
func HaltGuest(home, name string) error {
	return os.WriteFile(filepath.Join(home, "vms", name, HaltFile), nil, 0o600)
}

// SharedFilesDir is where macOS mounts the Virtualization framework's
// automount shares (relative to the guest's root).
const SharedFilesDir = "Volumes/My Shared Files"

// GuestRoot is what the guest of a fake VM sees as "/" of its shares: the
// fake lays the VM's --dir shares out under it where macOS shows them.
func GuestRoot(home, name string) string { return filepath.Join(home, "vms", name, "guest-root") }

// LastExit says how the VM's last fake run ended: "shutdown", "forced",
// "suspended", "killed", or "" when none ended.
func LastExit(home, name string) string {
	b, _ := os.ReadFile(filepath.Join(home, "vms", name, LastExitFile)) //nolint:gosec // G304: the test's TART_HOME.
	return string(b)
}

// BootID is the boot id of the fake VM's guest: what macOS would say of
// its boot session; "" when it never booted.
func BootID(home, name string) string {
	b, _ := os.ReadFile(filepath.Join(home, "vms", name, BootIDFile)) //nolint:gosec // G304: the test's TART_HOME.
	return strings.TrimSpace(string(b))
}

// Serial is the fake VM's machine identifier, its config.json "ecid", which
// macOS in it shows as its serial number; "" when it has none.
func Serial(home, name string) string {
	var c struct {
		ECID string `json:"ecid"`
	}
	b, err := os.ReadFile(filepath.Join(home, "vms", name, ConfigFile)) //nolint:gosec // G304: the test's TART_HOME.
	if err != nil || json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.ECID
}

// Knobs tune the fake; they live in TART_HOME/fake.json, read by every
// invocation, so a test may change them while VMs run.
type Knobs struct {
	// MaxVMs is the framework's limit on running VMs; 0 means 2.
	MaxVMs int `json:"maxVMs,omitempty"`
	// Stuck makes every run fail with the VM-limit error, even with no VM
	// running.
	Stuck bool `json:"stuck,omitempty"`
	// BootMillis is how long run holds the VM's lock (tart lists the VM
	// running) before the framework starts, or refuses, the VM.
	BootMillis int `json:"bootMillis,omitempty"`
	// ResumeMillis replaces BootMillis for a run that restores the VM's
	// saved memory.
	ResumeMillis int `json:"resumeMillis,omitempty"`
	// NoControlSocket makes run not create control.sock, as tart on
	// macOS 13.
	NoControlSocket bool `json:"noControlSocket,omitempty"`
	// ShutdownDelayMillis is how long the guest takes to shut down once it
	// was told to.
	ShutdownDelayMillis int `json:"shutdownDelayMillis,omitempty"`
	// PowerButtonShutsDown makes the guest shut down on SIGUSR2 (tart's
	// requestStop). By default it does not: macOS answers the power button
	// with a dialog, as tart's own source warns.
	PowerButtonShutsDown bool `json:"powerButtonShutsDown,omitempty"`
	// NeverShutsDown makes the guest shut down on nothing, not even when
	// told from inside: macOS hangs, or its guest agent is missing. Only
	// tart stop (SIGINT) ends it.
	NeverShutsDown bool `json:"neverShutsDown,omitempty"`
	// Images are the OCI references clone can pull.
	Images []string `json:"images,omitempty"`
	// ImageSizes are the images' compressed disk sizes in bytes, as tart
	// prints them ("pulling disk (40.0 GB compressed)..."); an image with
	// none pulls at once.
	ImageSizes map[string]int64 `json:"imageSizes,omitempty"`
	// PullBytesPerSecond is the registry link's speed: a pull takes its
	// image's size over it. 0 pulls at once.
	PullBytesPerSecond int64 `json:"pullBytesPerSecond,omitempty"`
	// Digests are the registry's manifest digests ("sha256:...") by
	// reference; a reference with none has one of its own. Changing one
	// re-pushes the tag.
	Digests map[string]string `json:"digests,omitempty"`
}

// WriteKnobs writes the fake's knobs into home (TART_HOME).
func WriteKnobs(home string, k Knobs) error {
	b, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o750); err != nil {
		return err
	}
	tmp := filepath.Join(home, KnobsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(home, KnobsFile))
}

// ReadKnobs reads the fake's knobs from home; none is the zero Knobs.
func ReadKnobs(home string) (Knobs, error) {
	var k Knobs
	b, err := os.ReadFile(filepath.Join(home, KnobsFile)) //nolint:gosec // G304: the test's TART_HOME.
	if errors.Is(err, fs.ErrNotExist) {
		return k, nil
	}
	if err != nil {
		return k, err
	}
	err = json.Unmarshal(b, &k)
	return k, err
}

// Commands returns every invocation of the fake under home, in order, as
// its arguments joined by spaces ("run vm1 --no-graphics").
func Commands(home string) ([]string, error) {
	f, err := os.Open(filepath.Join(home, CommandsFile)) //nolint:gosec // G304: the test's TART_HOME.
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}

// Used tells whether any logged invocation under home ran the tart
// subcommand sub ("stop").
func Used(home, sub string) (bool, error) {
	cmds, err := Commands(home)
	if err != nil {
		return false, err
	}
	for _, c := range cmds {
		if f := strings.Fields(c); len(f) > 0 && f[0] == sub {
			return true, nil
		}
	}
	return false, nil
}

// To builds the faketart command as dir/tart with "go build" and returns
// its path; a TestMain may call it once for a whole package.
func To(dir string) (string, error) {
	return gocmd.Build(Package, dir, "tart", "faketart")
}

// Build builds the faketart command into a temporary directory of t and
// returns its path; the test fails when it cannot.
func Build(t testing.TB) string {
	t.Helper()
	p, err := To(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}
