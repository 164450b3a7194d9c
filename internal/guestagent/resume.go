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
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// A Mac of a suspended pool is restored from the memory its host saved: it
// wakes with the clock, the SSH host keys and the token it had when it was
// suspended, possibly days before. The host agent resumes it with a new
// configuration and the resumed file (guestprotocol.ResumedFile) in its
// share; the agent then, before it reports again:
//
//   - sets the clock to the host's time when it is behind (TLS and tokens
//     are judged by it);
//   - makes new SSH host keys, so none is older than this binding (the
//     host kept the old ones on its disk, in the saved memory);
//   - reads the configuration anew, with the token of this resume.
//
// What it acted on is recorded beside the task directory, so an agent
// restarted later in the same binding does not change the host keys a
// tenant already trusts.

// ClockSetter is a Platform that can set the guest's clock.
type ClockSetter interface {
	// SetClock sets the system clock to t.
	SetClock(t time.Time) error
}

// resumedRecord, beside the task directory, is the resumed file's content
// the agent last acted on.
const resumedRecord = "resumed"

// resumePoll is how often the agent looks for the host's resume: a resumed
// guest's timers run on from where they were, so only a look this often
// keeps a waiting tenant from waiting a heartbeat interval.
const resumePoll = 100 * time.Millisecond

// ResumedStamp is the resumed file in the share dir: the host's time at
// the resume, as written; "" when there is none.
func ResumedStamp(dir string) string {
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, guestprotocol.ResumedFile)) //nolint:gosec // the host agent's share.
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// RenewAfterResume renews what the guest woke with, when the share in dir
// says the host resumed it since the agent last looked: the clock through
// cs (nil: left), the host keys through h (nil: left); stateDir keeps the
// record. It reports whether it renewed: the caller then reads the
// configuration again.
func RenewAfterResume(cs ClockSetter, h GeneralizeHost, stateDir, dir string, logf func(string, ...any)) (bool, error) {
	stamp := ResumedStamp(dir)
	if stamp == "" {
		return false, nil
	}
	record := filepath.Join(stateDir, resumedRecord)
	if have, err := os.ReadFile(record); err == nil && strings.TrimSpace(string(have)) == stamp { //nolint:gosec // the agent's own file.
		return false, nil
	}
	logf("the host resumed this Mac from its saved state at %s; renewing the clock, the SSH host keys and the token", stamp)
	if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
		if cs != nil && time.Now().Before(at) {
			if err := cs.SetClock(at); err != nil {
				// The clock syncs on its own later; the keys and the token
				// must not wait for it.
				logf("setting the clock to the host's %s: %v", stamp, err)
			}
		}
	}
	if h != nil {
		if err := renewHostKeys(h); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return false, fmt.Errorf("recording the resume: %w", err)
	}
	if err := writeFileAtomic(record, []byte(stamp+"\n")); err != nil {
		return false, fmt.Errorf("recording the resume: %w", err)
	}
	return true, nil
}

// renewHostKeys removes the SSH host keys and makes new ones.
func renewHostKeys(h GeneralizeHost) error {
	keys, err := filepath.Glob(filepath.Join(h.TaskPath("/etc/ssh"), "ssh_host_*"))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := os.Remove(k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing SSH host key %s: %w", filepath.Base(k), err)
		}
	}
	if err := h.RegenerateHostKeys(); err != nil {
		return fmt.Errorf("making new SSH host keys: %w", err)
	}
	return nil
}

// WatchResume tells woke, as soon as the host agent resumed the guest,
// that the share says so; it returns when ctx ends.
func WatchResume(ctx context.Context, p Platform, woke chan<- struct{}) {
	t := time.NewTicker(resumePoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dir, err := p.ConfigDir()
		if err != nil || filepath.Base(dir) != guestprotocol.ConfigShareName {
			continue
		}
		if s := ResumedStamp(dir); s != "" && s != last {
			last = s
			select {
			case woke <- struct{}{}:
			default:
			}
		}
	}
}
