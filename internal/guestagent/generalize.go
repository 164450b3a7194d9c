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

package guestagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A golden image is a Mac's disk copied (a MacImage captures one). Its
// clones must not share what made the captured Mac a machine of its own or
// what its tenant left on it, so the agent generalises a disk on its first
// boot in another machine: it records, in its own directory, the identity
// of the machine whose config disk it last served (namespace, name and UID
// of the MacMachine), and when the config disk names another machine (or
// the disk has no record: a disk installed by hand, or a capture) it
// removes, before its first heartbeat:
//
//   - the files tasks placed (bootstrap files), listed in the placed-files
//     ledger, and the ledger;
//   - the task directory: every task's record, script and output (the task
//     log), so no task of another binding counts as done;
//   - in every home under /Users, and root's: ~/.ssh/authorized_keys and
//     authorized_keys2, the shell histories, .netrc and .git-credentials,
//     and the registration of a CI runner in a directory of the home
//     (.runner, .credentials, .credentials_rsaparams and _diag, where a
//     .runner file is);
//   - the SSH host keys, which are then made anew, so the clone's host keys
//     are its own.
//
// What cannot be removed is logged and left, so that no file can keep a
// clone from coming up. This is hygiene, not a boundary: a tenant who had
// the Mac could leave anything a shell can write (launch agents, shell
// start-up files, keys elsewhere); capture only Macs whose users are
// trusted (docs/golden-image.md).
//
// The agent token and its config disk are the machine's, never on the
// system disk; the SMBIOS serial and UUID are the machine's, set by the
// operator for each MacMachine.

// GeneralizeHost is what generalising a disk needs of the guest.
type GeneralizeHost interface {
	TaskHost
	// RegenerateHostKeys makes the SSH host keys that are missing
	// (ssh-keygen -A on a Mac).
	RegenerateHostKeys() error
}

// The agent's files beside its task directory.
const (
	identityFile    = "identity"
	placedFilesFile = "placed-files"
)

// Identity is the machine a config disk names, as the agent records it.
func Identity(cfg *Config) string {
	return cfg.Namespace + "/" + cfg.Machine + "/" + cfg.MachineUID
}

// Generalize makes the disk the one of the machine cfg names: on the first
// boot in another machine it removes what the disk's previous machine left
// and makes new SSH host keys; taskDir is the agent's task directory (its
// parent keeps the identity). It reports whether it generalised; a failure
// leaves the identity unrecorded, so the next try does it all again.
func Generalize(h GeneralizeHost, taskDir string, cfg *Config, logf func(string, ...any)) (bool, error) {
	stateDir := filepath.Dir(taskDir)
	idPath := filepath.Join(stateDir, identityFile)
	want := Identity(cfg)
	have, err := os.ReadFile(idPath) //nolint:gosec // the agent's own file.
	switch {
	case err == nil && strings.TrimSpace(string(have)) == want:
		return false, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("reading the disk's identity: %w", err)
	}
	previous := strings.TrimSpace(string(have))
	if previous == "" {
		previous = "no machine recorded"
	}
	logf("generalising the disk for machine %s (it was %s)", want, previous)
	// What cannot be removed is logged and left: a file its previous
	// tenant made undeletable must not keep every clone from coming up.
	// Only the host keys are worth holding the heartbeat for.
	if err := removePlaced(h, filepath.Join(stateDir, placedFilesFile)); err != nil {
		logf("generalising: %v", err)
	}
	if err := os.RemoveAll(taskDir); err != nil {
		logf("generalising: removing the task log: %v", err)
	}
	for _, home := range []string{h.TaskPath("/Users"), h.TaskPath("/var")} {
		if err := cleanHomes(home, filepath.Base(home) == "var"); err != nil {
			logf("generalising: %v", err)
		}
	}
	if err := renewHostKeys(h); err != nil {
		return false, err
	}
	if err := writeFileAtomic(idPath, []byte(want+"\n")); err != nil {
		return false, fmt.Errorf("recording the disk's identity: %w", err)
	}
	return true, nil
}

// removePlaced removes every file the ledger lists, then the ledger.
func removePlaced(h TaskHost, ledger string) error {
	b, err := os.ReadFile(ledger) //nolint:gosec // the agent's own file.
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the placed-files ledger: %w", err)
	}
	var failed []string
	for _, p := range strings.Split(string(b), "\n") {
		if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p {
			continue
		}
		if !noLinkOnTheWay(h.TaskPath("/"), p) {
			// A tenant's link would make root remove what it points at.
			continue
		}
		if err := os.Remove(h.TaskPath(p)); err != nil && !errors.Is(err, fs.ErrNotExist) { //nolint:gosec // a path the agent placed, no link on the way (checked above).
			failed = append(failed, fmt.Sprintf("removing bootstrap file %s: %v", p, err))
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	if err := os.Remove(ledger); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the placed-files ledger: %w", err)
	}
	return nil
}

// Files of a home a tenant leaves behind.
var homeLeftovers = []string{".ssh/authorized_keys", ".ssh/authorized_keys2", ".zsh_history", ".bash_history", ".zsh_sessions",
	".local/share/fish/fish_history", ".git-credentials", ".netrc"}

// Files of a CI runner's registration, in the runner's directory.
var runnerRegistration = []string{".runner", ".credentials", ".credentials_rsaparams", "_diag"}

// cleanHomes removes a tenant's leftovers from every home under users
// (/Users), or from root's home when root is set (users is /var, and the
// home is /var/root). What cannot be removed is reported, the rest is
// removed all the same.
func cleanHomes(users string, root bool) error {
	homes, err := os.ReadDir(users)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing homes: %w", err)
	}
	var failed []string
	for _, home := range homes {
		if !home.IsDir() || home.Name() == "Shared" || (root && home.Name() != "root") {
			continue
		}
		dir := filepath.Join(users, home.Name())
		for _, f := range homeLeftovers {
			if !noLinkOnTheWay(dir, f) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
				failed = append(failed, fmt.Sprintf("removing %s of %s: %v", f, home.Name(), err))
			}
		}
		subdirs, err := os.ReadDir(dir)
		if err != nil {
			failed = append(failed, fmt.Sprintf("listing the home of %s: %v", home.Name(), err))
			continue
		}
		for _, sub := range subdirs {
			runner := filepath.Join(dir, sub.Name())
			if !sub.IsDir() {
				continue
			}
			if _, err := os.Lstat(filepath.Join(runner, ".runner")); err != nil {
				continue
			}
			for _, f := range runnerRegistration {
				if err := os.RemoveAll(filepath.Join(runner, f)); err != nil {
					failed = append(failed, fmt.Sprintf("removing the runner registration in %s: %v", runner, err))
				}
			}
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// noLinkOnTheWay reports whether no directory between root and root/rel
// is a symbolic link: the agent removes as root, and a link a tenant made
// in a home (~/.ssh pointing at /var/root/.ssh, say) must not take the
// removal elsewhere. The last element may be a link; removing it removes
// the link.
func noLinkOnTheWay(root, rel string) bool {
	parts := strings.Split(strings.Trim(filepath.Clean("/"+rel), "/"), "/")
	dir := root
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		info, err := os.Lstat(dir) //nolint:gosec // looked at, never followed: that is the check.
		if errors.Is(err, fs.ErrNotExist) {
			return true
		}
		if err != nil || info.Mode()&fs.ModeSymlink != 0 || !info.IsDir() {
			return false
		}
	}
	return true
}

// recordPlaced adds path to the placed-files ledger beside taskDir.
func recordPlaced(taskDir, path string) error {
	if err := os.MkdirAll(filepath.Dir(taskDir), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(filepath.Dir(taskDir), placedFilesFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(path + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// writeFileAtomic replaces path with content: a synced temporary file
// renamed over it.
func writeFileAtomic(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) //nolint:gosec // the agent's own file.
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
