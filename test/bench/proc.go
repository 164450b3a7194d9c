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

// machineCPU is the busy and all CPU seconds of the whole machine so far
// (the "cpu" line of /proc/stat: busy is every field but idle and iowait),
// and its CPUs: what the API server, etcd, KubeVirt's control plane and
// the bench's own process used together.
func machineCPU() (busy, all float64, cpus int, err error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "cpu":
			// user nice system idle iowait irq softirq steal (guest and
			// guest_nice are within user and nice already).
			for k := 1; k < len(f) && k <= 8; k++ {
				v, err := strconv.ParseUint(f[k], 10, 64)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("/proc/stat: %w", err)
				}
				all += float64(v) / clockTicks
				if k != 4 && k != 5 {
					busy += float64(v) / clockTicks
				}
			}
		case len(f) > 0 && strings.HasPrefix(f[0], "cpu"):
			cpus++
		}
	}
	if all == 0 {
		return 0, 0, 0, fmt.Errorf("/proc/stat: no cpu line")
	}
	return busy, all, cpus, nil
}
