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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// keyHost is a GeneralizeHost whose host keys are files under root.
type keyHost struct {
	TaskHost
	root string
	made int
}

func (h *keyHost) TaskPath(p string) string { return filepath.Join(h.root, p) }

func (h *keyHost) RegenerateHostKeys() error {
	h.made++
	return os.WriteFile(filepath.Join(h.root, "etc/ssh/ssh_host_ed25519_key"), []byte(fmt.Sprint(h.made)), 0o600)
}

type clockRecorder struct{ set []time.Time }

func (c *clockRecorder) SetClock(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

func TestRenewAfterResume(t *testing.T) {
	root, share, state := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(root, "etc/ssh/ssh_host_rsa_key")
	if err := os.WriteFile(old, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, clk := &keyHost{root: root}, &clockRecorder{}
	logf := func(string, ...any) {}
	if renewed, err := RenewAfterResume(clk, h, state, share, logf); err != nil || renewed {
		t.Fatalf("no resumed file: renewed %v, %v; want nothing done", renewed, err)
	}
	ahead := time.Now().Add(time.Hour).UTC()
	if err := os.WriteFile(filepath.Join(share, guestprotocol.ResumedFile), []byte(ahead.Format(time.RFC3339Nano)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	renewed, err := RenewAfterResume(clk, h, state, share, logf)
	if err != nil || !renewed {
		t.Fatalf("resumed: renewed %v, %v; want renewed", renewed, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old host key is left: %v", err)
	}
	if h.made != 1 {
		t.Errorf("host keys made %d times; want 1", h.made)
	}
	if len(clk.set) != 1 || !clk.set[0].Equal(ahead) {
		t.Errorf("clock set to %v; want the host's %v, the guest's being behind", clk.set, ahead)
	}
	if renewed, err := RenewAfterResume(clk, h, state, share, logf); err != nil || renewed || h.made != 1 {
		t.Fatalf("the same resume again (an agent restarted): renewed %v, %v, keys made %d; want nothing changed", renewed, err, h.made)
	}
}
