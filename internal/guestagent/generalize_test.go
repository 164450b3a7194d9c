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
	"os"
	"path/filepath"
	"testing"
)

// rootedHost is a guest whose / is a directory of the test's.
type rootedHost struct {
	root     string
	regen    int
	regenErr error
}

func (h *rootedHost) TaskUser(name string) (TaskUser, error) {
	return TaskUser{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: h.TaskPath("/Users/" + name)}, nil
}

func (h *rootedHost) TaskPath(path string) string {
	return filepath.Join(h.root, filepath.Clean("/"+path))
}

func (h *rootedHost) RegenerateHostKeys() error {
	if h.regenErr != nil {
		return h.regenErr
	}
	h.regen++
	if err := os.MkdirAll(h.TaskPath("/etc/ssh"), 0o750); err != nil {
		return err
	}
	return os.WriteFile(h.TaskPath("/etc/ssh/ssh_host_ed25519_key.pub"), []byte("ssh-ed25519 NEW"), 0o600)
}

func (h *rootedHost) write(t *testing.T, path, content string) {
	t.Helper()
	p := h.TaskPath(path)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (h *rootedHost) exists(path string) bool {
	_, err := os.Lstat(h.TaskPath(path))
	return err == nil
}

func TestGeneralizeRemovesWhatTheCapturedMacLeftAndKeepsTheImage(t *testing.T) {
	h := &rootedHost{root: t.TempDir()}
	taskDir := h.TaskPath("/var/db/macvirt-agent/tasks")
	source := &Config{Namespace: "pools", Machine: "base-1", MachineUID: "uid-1"}
	clone := &Config{Namespace: "pools", Machine: "xcode-1", MachineUID: "uid-2"}
	h.write(t, "/var/db/macvirt-agent/identity", Identity(source)+"\n")
	h.write(t, "/var/db/macvirt-agent/tasks/claim-1/task.json", "{}")
	h.write(t, "/var/db/macvirt-agent/tasks/claim-1/output.log", "secret output")
	h.write(t, "/Users/admin/.netrc", "machine github.com password x")
	if err := recordPlaced(taskDir, "/Users/admin/.netrc"); err != nil {
		t.Fatal(err)
	}
	h.write(t, "/Users/admin/.ssh/authorized_keys", "ssh-ed25519 TENANT")
	h.write(t, "/Users/admin/.zsh_history", "git push")
	h.write(t, "/Users/admin/actions-runner/.runner", "{}")
	h.write(t, "/Users/admin/actions-runner/.credentials", "{}")
	h.write(t, "/Users/admin/actions-runner/run.sh", "#!/bin/sh")
	h.write(t, "/Users/admin/Applications/Xcode.app/Info.plist", "xcode")
	h.write(t, "/etc/ssh/ssh_host_ed25519_key", "OLD PRIVATE")
	h.write(t, "/etc/ssh/ssh_host_ed25519_key.pub", "ssh-ed25519 OLD")
	h.write(t, "/etc/ssh/sshd_config", "PasswordAuthentication no")

	done, err := Generalize(h, taskDir, clone, t.Logf)
	if err != nil || !done {
		t.Fatalf("Generalize on a clone's first boot = (%v, %v), want (true, nil)", done, err)
	}
	for _, gone := range []string{"/var/db/macvirt-agent/tasks", "/var/db/macvirt-agent/placed-files", "/Users/admin/.netrc",
		"/Users/admin/.ssh/authorized_keys", "/Users/admin/.zsh_history", "/Users/admin/actions-runner/.runner",
		"/Users/admin/actions-runner/.credentials", "/etc/ssh/ssh_host_ed25519_key"} {
		if h.exists(gone) {
			t.Errorf("%s is still on the clone's disk", gone)
		}
	}
	for _, kept := range []string{"/Users/admin/actions-runner/run.sh", "/Users/admin/Applications/Xcode.app/Info.plist", "/etc/ssh/sshd_config"} {
		if !h.exists(kept) {
			t.Errorf("%s, part of the image, was removed", kept)
		}
	}
	if b, _ := os.ReadFile(h.TaskPath("/etc/ssh/ssh_host_ed25519_key.pub")); string(b) != "ssh-ed25519 NEW" || h.regen != 1 {
		t.Errorf("host key after generalising = %q (regenerated %d times), want a new one, made once", b, h.regen)
	}
	if b, _ := os.ReadFile(h.TaskPath("/var/db/macvirt-agent/identity")); string(b) != Identity(clone)+"\n" {
		t.Errorf("identity = %q, want the clone's", b)
	}

	h.write(t, "/Users/admin/.ssh/authorized_keys", "ssh-ed25519 CLAIM")
	if done, err := Generalize(h, taskDir, clone, t.Logf); err != nil || done {
		t.Fatalf("Generalize on the clone's next boot = (%v, %v), want (false, nil)", done, err)
	}
	if !h.exists("/Users/admin/.ssh/authorized_keys") || h.regen != 1 {
		t.Error("a reboot of the same machine generalised its disk again")
	}
}

func TestGeneralizeTriesAgainWhenItFailed(t *testing.T) {
	h := &rootedHost{root: t.TempDir(), regenErr: errors.New("ssh-keygen failed")}
	taskDir := h.TaskPath("/var/db/macvirt-agent/tasks")
	cfg := &Config{Namespace: "pools", Machine: "m", MachineUID: "u"}
	if _, err := Generalize(h, taskDir, cfg, t.Logf); err == nil {
		t.Fatal("Generalize with a failing host key generation succeeded")
	}
	if h.exists("/var/db/macvirt-agent/identity") {
		t.Fatal("a failed generalisation recorded the identity, so it would never be finished")
	}
	h.regenErr = nil
	if done, err := Generalize(h, taskDir, cfg, t.Logf); err != nil || !done {
		t.Fatalf("retry = (%v, %v), want (true, nil)", done, err)
	}
}

func TestGeneralizeFollowsNoTenantLink(t *testing.T) {
	h := &rootedHost{root: t.TempDir()}
	taskDir := h.TaskPath("/var/db/macvirt-agent/tasks")
	h.write(t, "/Library/Keys/authorized_keys", "ssh-ed25519 SYSTEM")
	h.write(t, "/etc/sudoers", "root ALL=(ALL) ALL")
	if err := os.MkdirAll(h.TaskPath("/Users/admin"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.TaskPath("/Library/Keys"), h.TaskPath("/Users/admin/.ssh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(h.TaskPath("/etc"), h.TaskPath("/Users/admin/etc")); err != nil {
		t.Fatal(err)
	}
	if err := recordPlaced(taskDir, "/Users/admin/etc/sudoers"); err != nil {
		t.Fatal(err)
	}
	if _, err := Generalize(h, taskDir, &Config{Namespace: "n", Machine: "m", MachineUID: "u"}, t.Logf); err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"/Library/Keys/authorized_keys", "/etc/sudoers"} {
		if !h.exists(kept) {
			t.Errorf("generalising followed a tenant's link and removed %s", kept)
		}
	}
}

func TestGeneralizeIsNotHeldUpByWhatItCannotRemove(t *testing.T) {
	h := &rootedHost{root: t.TempDir()}
	taskDir := h.TaskPath("/var/db/macvirt-agent/tasks")
	if err := recordPlaced(taskDir, "/Users/admin/.cfg/x"); err != nil {
		t.Fatal(err)
	}
	// The tenant replaced the placed file with a directory that is not
	// empty, which a file's removal cannot take.
	h.write(t, "/Users/admin/.cfg/x/y", "")
	h.write(t, "/var/root/.ssh/authorized_keys", "ssh-ed25519 ROOT-LEFTOVER")
	done, err := Generalize(h, taskDir, &Config{Namespace: "n", Machine: "m", MachineUID: "u"}, t.Logf)
	if err != nil || !done {
		t.Fatalf("Generalize = (%v, %v), want the clone to come up all the same", done, err)
	}
	if h.exists("/var/root/.ssh/authorized_keys") {
		t.Error("root's authorized_keys survived")
	}
	if !h.exists("/var/db/macvirt-agent/identity") {
		t.Error("the identity was not recorded, so every boot would try again")
	}
}
