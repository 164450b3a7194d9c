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
	"os"
	"path/filepath"
	"syscall"
)

// LockOwner is the PID holding a write lock on path (a VM's config.json,
// locked by tart run while the VM runs); 0 when none.
func LockOwner(path string) int {
	f, err := os.Open(path) //nolint:gosec // G304: a VM's config.json.
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}

// TryLock takes a write lock on the whole of f without waiting, as tart
// run does on config.json; false when another process holds it.
func TryLock(f *os.File) bool {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk) == nil
}

// KillAll kills with SIGKILL every fake "tart run" under home (TART_HOME),
// found by its VM's lock, so a test leaves no process behind; meant for
// t.Cleanup.
func KillAll(home string) {
	entries, _ := os.ReadDir(filepath.Join(home, "vms"))
	for _, e := range entries {
		if pid := LockOwner(filepath.Join(home, "vms", e.Name(), "config.json")); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
