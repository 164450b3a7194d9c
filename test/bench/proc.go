package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat:
// sysconf(_SC_CLK_TCK), which is USER_HZ, 100 on Linux on every
// architecture the bench runs on. It is assumed rather than asked for,
// which would take cgo.
const clockTicks = 100

// procCPU is the CPU seconds, user and system, process pid has used so
// far (utime and stime of /proc/<pid>/stat, 10 ms a tick): how the bench
// reads both kube-controller-manager's and the operator's process.
func procCPU(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields that follow start after the last ')'. utime and stime are
	// fields 14 and 15, so the 12th and 13th after it.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(f))
	}
	utime, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return float64(utime+stime) / clockTicks, nil
}

// processCPU is this process's CPU seconds so far (the bench's own:
// creating and watching).
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
