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

package tart

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// detach starts the child in a new session, so neither the agent's exit
// nor a signal to its process group reaches the VM.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}

// requestStop sends SIGUSR2, on which "tart run" asks the guest to stop.
func requestStop(pid int) error {
	return syscall.Kill(pid, syscall.SIGUSR2)
}

// isTartRun tells whether pid lives and runs "tart run NAME": a PID file
// may outlive its process, and its number may be reused, and SIGUSR2
// kills most other programs.
func isTartRun(pid int, name string) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	out, err := exec.Command("ps", "-o", "args=", "-p", strconv.Itoa(pid)).Output() //nolint:gosec,noctx // G204: a number.
	if err != nil {
		return false
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "run" && f[i+1] == name {
			return true
		}
	}
	return false
}

// lockOwner is the PID holding the write lock on a VM's config.json, as
// tart run holds it while its VM runs; 0 when none or unknown.
func lockOwner(path string) int {
	f, err := os.Open(path) //nolint:gosec // G304: tart's own file.
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0
	}
	return int(lk.Pid)
}
