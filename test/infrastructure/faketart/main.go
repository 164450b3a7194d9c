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

package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/macvirt/macvirt/test/infrastructure/faketart/build"
)

// Version is what the fake's "tart --version" prints: the tart whose
// source it follows.
const Version = "2.32.1"

// tartError is a failure printed to stderr with tart's exit code; one
// with no msg printed its words already.
type tartError struct {
	code int
	msg  string
}

func (e *tartError) Error() string { return e.msg }

func notExist(name string) error {
	return &tartError{2, fmt.Sprintf("the specified VM %q does not exist", name)}
}

func failf(format string, a ...any) error { return &tartError{1, fmt.Sprintf(format, a...)} }

func main() {
	err := run(os.Args[1:])
	if err == nil {
		os.Exit(0)
	}
	if msg := err.Error(); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
	}
	var te *tartError
	if errors.As(err, &te) {
		os.Exit(te.code)
	}
	os.Exit(1)
}

// vmConfig is the fake's config.json of a VM.
type vmConfig struct {
	OS      string `json:"os"`
	CPU     int    `json:"cpuCount"`
	Memory  int    `json:"memorySizeMB"`
	Disk    int    `json:"diskGB"`
	Display string `json:"display"`
	Source  string `json:"source"`
	// MAC is the VM's MAC address, tart's config.json "macAddress".
	MAC string `json:"macAddress"`
	// ECID is the macOS VM's machine identifier, base64 as tart's
	// config.json "ecid": macOS shows it as the serial number.
	ECID string `json:"ecid,omitempty"`
}

// runInfo is what a fake "tart run" records of its invocation.
type runInfo struct {
	PID  int      `json:"pid"`
	Args []string `json:"args"`
	// Suspendable: run with --suspendable, or made so by a saved state.
	Suspendable bool `json:"suspendable"`
}

type env struct {
	home  string
	knobs build.Knobs
}

func run(args []string) error {
	home := os.Getenv("TART_HOME")
	if home == "" {
		return failf("faketart: TART_HOME must be set")
	}
	if err := os.MkdirAll(filepath.Join(home, "vms"), 0o750); err != nil { //nolint:gosec // G703: TART_HOME is the fake's to use.
		return err
	}
	logCommand(home, args)
	knobs, err := build.ReadKnobs(home)
	if err != nil {
		return failf("faketart: %v", err)
	}
	e := &env{home: home, knobs: knobs}
	if len(args) == 0 {
		return failf("Error: Missing expected argument '<subcommand>'")
	}
	pos, opts := parseArgs(args[1:])
	need := func(n int) error {
		if len(pos) < n {
			return failf("Error: Missing expected argument")
		}
		return nil
	}
	switch args[0] {
	case "--version":
		// The version whose source the fake follows.
		fmt.Println(Version)
		return nil
	case "list":
		return e.list(opts)
	case "get":
		if err := need(1); err != nil {
			return err
		}
		return e.get(pos[0])
	case "ip":
		if err := need(1); err != nil {
			return err
		}
		return e.ip(pos[0])
	case "pull":
		if err := need(1); err != nil {
			return err
		}
		if err := e.known(pos[0]); err != nil {
			return err
		}
		fmt.Printf("pulling %s...\n", pos[0])
		return e.pull(pos[0])
	case "clone":
		if err := need(2); err != nil {
			return err
		}
		return e.clone(pos[0], pos[1])
	case "set":
		if err := need(1); err != nil {
			return err
		}
		return e.set(pos[0], opts)
	case "run":
		if err := need(1); err != nil {
			return err
		}
		return e.run(pos[0], args, opts)
	case "suspend":
		if err := need(1); err != nil {
			return err
		}
		return e.suspend(pos[0])
	case "stop":
		if err := need(1); err != nil {
			return err
		}
		return e.stop(pos[0], opts)
	case "delete":
		if err := need(1); err != nil {
			return err
		}
		for _, n := range pos {
			if err := e.delete(n); err != nil {
				return err
			}
		}
		return nil
	}
	return failf("Error: Unknown subcommand '%s'", args[0])
}

// logCommand appends the invocation to TART_HOME/commands.log.
func logCommand(home string, args []string) {
	f, err := os.OpenFile(filepath.Join(home, build.CommandsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600) //nolint:gosec // G304: TART_HOME.
	if err != nil {
		return
	}
	_, _ = f.WriteString(strings.Join(args, " ") + "\n")
	_ = f.Close()
}

// parseArgs splits positional arguments from options; an option's value
// follows it or an "=", and flags ("--no-graphics") take none.
func parseArgs(args []string) ([]string, map[string][]string) {
	var pos []string
	opts := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		k, v, ok := strings.Cut(a, "=")
		k = strings.TrimLeft(k, "-")
		switch {
		case ok:
		case k == "no-graphics" || k == "q" || k == "quiet" || k == "insecure" ||
			k == "suspendable" || k == "random-serial":
			v = "true"
		case i+1 < len(args):
			i++
			v = args[i]
		}
		opts[k] = append(opts[k], v)
	}
	return pos, opts
}

func (e *env) vmDir(name string) string { return filepath.Join(e.home, "vms", name) }

func (e *env) configPath(name string) string { return filepath.Join(e.vmDir(name), build.ConfigFile) }

func (e *env) statePath(name string) string { return filepath.Join(e.vmDir(name), build.StateFile) }

func (e *env) readConfig(name string) (vmConfig, error) {
	var c vmConfig
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return c, notExist(name)
	}
	b, err := os.ReadFile(e.configPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return c, notExist(name)
	}
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// writeConfig rewrites config.json in place, keeping its inode, so a
// running VM's lock on it holds.
func (e *env) writeConfig(name string, c vmConfig) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(e.configPath(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (e *env) names() []string {
	entries, _ := os.ReadDir(filepath.Join(e.home, "vms"))
	var out []string
	for _, d := range entries {
		if _, err := os.Stat(e.configPath(d.Name())); err == nil {
			out = append(out, d.Name())
		}
	}
	sort.Strings(out)
	return out
}

// lockOwner is the PID holding the VM's config.json lock, as tart run
// does while its VM runs; 0 when none.
func (e *env) lockOwner(name string) int {
	return build.LockOwner(e.configPath(name))
}

// state is the VM's state as tart's VMDirectory.state says it: running
// while its lock is held, else suspended when its memory is saved.
func (e *env) state(name string) string {
	if e.lockOwner(name) > 0 {
		return "running"
	}
	if _, err := os.Stat(e.statePath(name)); err == nil {
		return "suspended"
	}
	return "stopped"
}

func printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// ociNames lists the OCI cache as tart's VMStorageOCI.list does: a tag
// (a symlink) as host/namespace:tag, a digest (a directory) as
// host/namespace@sha256:..., the host's ":" decoded.
func (e *env) ociNames() []string {
	base := filepath.Join(e.home, "cache", "OCIs")
	var out []string
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == base {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		parent, leaf := filepath.Dir(rel), filepath.Base(rel)
		name := ""
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			name = parent + ":" + leaf
		case d.IsDir() && strings.HasPrefix(leaf, "sha256:"):
			name = parent + "@" + leaf
		default:
			return nil
		}
		if n, err := url.PathUnescape(name); err == nil {
			out = append(out, n)
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func (e *env) list(opts map[string][]string) error {
	source := ""
	if v := opts["source"]; len(v) > 0 {
		source = v[len(v)-1]
	}
	type entry struct {
		Source   string `json:"Source"`
		Name     string `json:"Name"`
		Disk     int    `json:"Disk"`
		Size     int    `json:"Size"`
		Accessed string `json:"Accessed"`
		Running  bool   `json:"Running"`
		State    string `json:"State"`
	}
	out := []entry{}
	now := time.Now().UTC().Format(time.RFC3339)
	if source == "" || source == "local" {
		for _, n := range e.names() {
			c, _ := e.readConfig(n)
			st := e.state(n)
			out = append(out, entry{"local", n, c.Disk, c.Disk / 2, now, st == "running", st})
		}
	}
	if source == "" || source == "oci" {
		for _, n := range e.ociNames() {
			out = append(out, entry{"OCI", n, 50, 25, now, false, "stopped"})
		}
	}
	if f := opts["format"]; len(f) > 0 && f[len(f)-1] == "json" {
		return printJSON(out)
	}
	fmt.Println("Source\tName\tDisk\tSize\tAccessed\tState")
	for _, x := range out {
		fmt.Printf("%s\t%s\t%d\t%d\t%s\t%s\n", x.Source, x.Name, x.Disk, x.Size, x.Accessed, x.State)
	}
	return nil
}

func (e *env) get(name string) error {
	c, err := e.readConfig(name)
	if err != nil {
		return err
	}
	st := e.state(name)
	return printJSON(map[string]any{
		"OS": c.OS, "CPU": c.CPU, "Memory": c.Memory, "Disk": c.Disk, "DiskFormat": "raw",
		"Size": fmt.Sprintf("%.3f", float64(c.Disk)/2), "Display": c.Display,
		"Running": st == "running", "State": st,
	})
}

func (e *env) ip(name string) error {
	c, err := e.readConfig(name)
	if err != nil {
		return err
	}
	if e.lockOwner(name) == 0 {
		return failf("no IP address found, is your VM running?")
	}
	// tart ip reads the lease vmnet's DHCP server gave the VM's MAC
	// (MACAddressResolver/Leases.swift, /var/db/dhcpd_leases): two
	// VMs that run at once never share an address. The fake leases one per
	// MAC, under a lock, skipping the addresses of the other running VMs.
	lock, err := os.OpenFile(filepath.Join(e.home, "leases.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	taken := map[string]bool{}
	for _, n := range e.names() {
		if n == name || e.lockOwner(n) == 0 {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(e.vmDir(n), "lease")); err == nil {
			if f := strings.Fields(string(b)); len(f) == 2 {
				taken[f[1]] = true
			}
		}
	}
	leasePath := filepath.Join(e.vmDir(name), "lease")
	if b, err := os.ReadFile(leasePath); err == nil { //nolint:gosec // G304: a VM of TART_HOME.
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == c.MAC && !taken[f[1]] {
			fmt.Println(f[1])
			return nil
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(c.MAC))
	for i := range uint32(250) {
		addr := fmt.Sprintf("192.168.64.%d", 2+(h.Sum32()+i)%250)
		if taken[addr] {
			continue
		}
		if err := os.WriteFile(leasePath, []byte(c.MAC+" "+addr+"\n"), 0o600); err != nil {
			return err
		}
		fmt.Println(addr)
		return nil
	}
	return failf("no IP address found, is your VM running?")
}

func imageMAC(ref string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ref))
	b := h.Sum(nil)
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// imageECID is the machine identifier an image carries: every clone of
// it has this one until tart set --random-serial.
func imageECID(ref string) string {
	sum := sha256.Sum256([]byte("ecid " + ref))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// randomECID is a new machine identifier, as VZMacMachineIdentifier()
// gives.
func randomECID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// randomMAC is a new locally administered MAC address, as
// VZMACAddress.randomLocallyAdministered gives.
func randomMAC() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	b[0] = b[0]&0xfe | 0x02
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

// hasMAC says whether a local VM other than except has the MAC address:
// running, or only too (tart's clone asks of all, its run of the running).
func (e *env) hasMAC(mac, except string, runningOnly bool) bool {
	for _, n := range e.names() {
		if n == except || (runningOnly && e.lockOwner(n) == 0) {
			continue
		}
		if c, err := e.readConfig(n); err == nil && c.MAC == mac {
			return true
		}
	}
	return false
}

func (e *env) clone(src, dst string) error {
	c := vmConfig{OS: "darwin", CPU: 4, Memory: 8192, Disk: 50, Display: "1024x768", Source: src,
		MAC: imageMAC(src), ECID: imageECID(src)}
	suspended := false
	if strings.Contains(src, "/") {
		if err := e.known(src); err != nil {
			return err
		}
		// tart's Clone.swift pulls only a reference it has not cached: a
		// cached tag is used whatever the registry now has.
		if !e.cachedTag(src) {
			if err := e.pull(src); err != nil {
				return err
			}
		}
	} else if sc, err := e.readConfig(src); err != nil {
		return err
	} else {
		c, suspended = sc, e.state(src) == "suspended"
	}
	if dst == "" || strings.ContainsAny(dst, `/\`) {
		return failf("faketart: bad VM name %q", dst)
	}
	// tart's Clone.swift: the copy gets a new MAC address when any local
	// VM (running or not) has the source's, unless the source is
	// suspended: its saved memory holds its MAC address.
	newMAC := e.hasMAC(c.MAC, dst, false) && !suspended
	if newMAC {
		c.MAC = randomMAC()
	}
	// tart moves the new VM over one of the same name; so does the fake.
	_ = os.RemoveAll(e.vmDir(dst))
	if err := os.MkdirAll(e.vmDir(dst), 0o750); err != nil {
		return err
	}
	if err := e.writeConfig(dst, c); err != nil {
		return err
	}
	// VMDirectory.clone copies the saved memory too (regenerateMACAddress
	// then drops it); with it goes the guest's boot.
	if suspended && !newMAC {
		if err := e.copyState(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// copyState copies the source's saved memory (sparse, as APFS's clone
// keeps it) and its guest's boot id.
func (e *env) copyState(src, dst string) error {
	st, err := os.Stat(e.statePath(src))
	if err != nil {
		return err
	}
	if err := e.sparse(e.statePath(dst), st.Size()); err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(e.vmDir(src), build.BootIDFile)); err == nil {
		return os.WriteFile(filepath.Join(e.vmDir(dst), build.BootIDFile), b, 0o600) //nolint:gosec // G703: TART_HOME is the fake's to use.
	}
	return nil
}

// sparse makes path a file of size bytes holding no blocks.
func (e *env) sparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600) //nolint:gosec // G304: a VM of TART_HOME.
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (e *env) set(name string, opts map[string][]string) error {
	c, err := e.readConfig(name)
	if err != nil {
		return err
	}
	for k, p := range map[string]*int{"cpu": &c.CPU, "memory": &c.Memory} {
		if v := opts[k]; len(v) > 0 {
			n, err := strconv.Atoi(v[len(v)-1])
			if err != nil {
				return failf("Error: The value '%s' is invalid for '--%s <%s>'", v[len(v)-1], k, k)
			}
			*p = n
		}
	}
	// Set.swift: --random-serial gives a macOS VM a new machine identifier.
	if len(opts["random-serial"]) > 0 && c.OS == "darwin" {
		c.ECID = randomECID()
	}
	return e.writeConfig(name, c)
}

// run imitates tart run: it takes the VM's lock, fails on the knobs' VM
// limit as the framework would, restores the VM's saved memory or boots it,
// then stays in the foreground until the guest shuts down (SIGUSR2), a
// forced stop (SIGINT) or tart suspend (SIGUSR1).
func (e *env) run(name string, args []string, opts map[string][]string) error {
	if _, err := e.readConfig(name); err != nil {
		return err
	}
	shares, err := parseDirs(opts["dir"])
	if err != nil {
		return err
	}
	// Run.swift's validate: a suspended VM runs suspendable whatever the
	// flags say.
	suspendable := len(opts["suspendable"]) > 0 || e.state(name) == "suspended"
	// tart's Run.swift: a VM whose MAC address another running VM has gets
	// a new one before it starts (before the lock: writing the config
	// replaces the file the lock is on), and VMDirectory's
	// regenerateMACAddress drops its saved memory: it boots cold.
	if c, err := e.readConfig(name); err == nil && e.hasMAC(c.MAC, name, true) {
		fmt.Println("There is already a running VM with the same MAC address!")
		fmt.Println("Resetting VM to assign a new MAC address...")
		c.MAC = randomMAC()
		_ = os.Remove(e.statePath(name))
		if err := e.writeConfig(name, c); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(e.configPath(name), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	// f stays open: closing any descriptor of the file drops the lock.
	if !build.TryLock(f) {
		return &tartError{2, fmt.Sprintf("VM %q is already running!", name)}
	}
	_, err = os.Stat(e.statePath(name))
	restore := err == nil
	if restore {
		fmt.Println("restoring VM state from a snapshot...")
		time.Sleep(time.Duration(e.knobs.ResumeMillis) * time.Millisecond)
	} else {
		time.Sleep(time.Duration(e.knobs.BootMillis) * time.Millisecond)
	}
	var others []string
	for _, n := range e.names() {
		if n != name && e.lockOwner(n) > 0 {
			others = append(others, n)
		}
	}
	maxVMs := e.knobs.MaxVMs
	if maxVMs <= 0 {
		maxVMs = 2
	}
	// A refused restore keeps the saved memory.
	if e.knobs.Stuck || len(others) >= maxVMs {
		hint := ""
		if len(others) > 0 {
			hint = " (other running VMs: " + strings.Join(others, ", ") + ")"
		}
		return failf("The number of VMs exceeds the system limit%s", hint)
	}
	if restore {
		if err := os.Remove(e.statePath(name)); err != nil {
			return err
		}
		fmt.Println("resuming VM...")
	} else if err := e.boot(name); err != nil {
		return err
	}
	if err := e.mountShares(name, shares); err != nil {
		return failf("faketart: the guest's shares: %v", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGINT)
	info, _ := json.Marshal(runInfo{PID: os.Getpid(), Args: args, Suspendable: suspendable})
	_ = os.WriteFile(filepath.Join(e.vmDir(name), "run.json"), info, 0o600)
	// tart makes the control socket once the VM started; a plain file
	// does for the driver, which only looks at it.
	sock := filepath.Join(e.vmDir(name), "control.sock")
	_ = os.Remove(sock)
	if !e.knobs.NoControlSocket {
		_ = os.WriteFile(sock, nil, 0o600)
	}
	// The guest shuts down when macOS is told to from inside (its guest
	// agent ran shutdown -h now: build.HaltGuest), and on the power button
	// only when PowerButtonShutsDown says this macOS does; otherwise, as
	// tart's source warns, macOS answers it with a dialog and runs on.
	halt := filepath.Join(e.vmDir(name), build.HaltFile)
	_ = os.Remove(halt)
	shutDown := func() {
		knobs, _ := build.ReadKnobs(e.home)
		time.AfterFunc(time.Duration(knobs.ShutdownDelayMillis)*time.Millisecond, func() {
			fmt.Println("guest shut down")
			e.lastExit(name, "shutdown")
			os.Exit(0)
		})
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	halting := false
	for {
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGINT:
				fmt.Println("forced stop")
				e.lastExit(name, "forced")
				return nil
			case syscall.SIGUSR1:
				return e.suspendRun(name, suspendable)
			}
			fmt.Println("Requesting guest OS to stop...")
			knobs, err := build.ReadKnobs(e.home)
			if err != nil || !knobs.PowerButtonShutsDown || knobs.NeverShutsDown || halting {
				fmt.Println("macOS shows a shutdown dialog; nobody answers it")
				continue
			}
			halting = true
			shutDown()
		case <-tick.C:
			if knobs, err := build.ReadKnobs(e.home); err == nil && knobs.NeverShutsDown {
				continue
			}
			if _, err := os.Stat(halt); err == nil && !halting {
				halting = true
				shutDown()
			}
		}
	}
}

// boot is a cold boot of the guest: a new boot id.
func (e *env) boot(name string) error {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return os.WriteFile(filepath.Join(e.vmDir(name), build.BootIDFile), []byte(hex.EncodeToString(b)+"\n"), 0o600)
}

// suspendRun is a run's answer to SIGUSR1 (Run.swift): a suspendable VM's
// memory is saved beside its disk, as large as the VM's memory, and the
// run exits 0; any other VM fails validateSaveRestoreSupport (its audio
// and entropy devices), and the run exits 1, ending the VM abruptly.
func (e *env) suspendRun(name string, suspendable bool) error {
	// The framework's words are the fake's guess.
	why := "The virtual machine configuration does not support save and restore."
	if suspendable {
		fmt.Println("pausing VM to take a snapshot...")
		fmt.Println("creating a snapshot...")
		c, err := e.readConfig(name)
		if err == nil {
			err = e.sparse(e.statePath(name), int64(c.Memory)<<20)
		}
		if err == nil {
			fmt.Println("snapshot created successfully! shutting down the VM...")
			e.lastExit(name, "suspended")
			return nil
		}
		_ = os.Remove(e.statePath(name))
		why = err.Error()
	}
	// RuntimeError.SuspendFailed, printed to standard output.
	fmt.Println("Failed to suspend the VM: " + why)
	e.lastExit(name, "killed")
	return &tartError{1, ""}
}

// automountTag is the Virtualization framework's automount tag, tart's
// default for --dir.
const automountTag = "com.apple.virtio-fs.automount"

// share is one --dir of tart run: [NAME:]PATH[:ro][,tag=TAG].
type share struct {
	name, path, tag string
	readOnly        bool
}

// parseDirs reads tart run's --dir values as tart does (Run.swift's
// DirectoryShare): NAME:PATH:OPTIONS, NAME:PATH, or PATH; OPTIONS are
// comma-separated "ro" and "tag=TAG", the tag the automount one unless
// given. On one tag, several shares must all be named.
func parseDirs(values []string) ([]share, error) {
	var out []share
	for _, v := range values {
		parts := strings.Split(v, ":")
		var sh share
		switch len(parts) {
		case 1:
			sh.path = parts[0]
		case 2:
			sh.name, sh.path = parts[0], parts[1]
		case 3:
			sh.name, sh.path = parts[0], parts[1]
			for _, o := range strings.Split(parts[2], ",") {
				switch {
				case o == "ro":
					sh.readOnly = true
				case strings.HasPrefix(o, "tag="):
					sh.tag = strings.TrimPrefix(o, "tag=")
				}
			}
		default:
			return nil, failf("invalid --dir syntax: %q", v)
		}
		if sh.tag == "" {
			sh.tag = automountTag
		}
		out = append(out, sh)
	}
	perTag := map[string]int{}
	for _, sh := range out {
		perTag[sh.tag]++
	}
	for _, sh := range out {
		if perTag[sh.tag] > 1 && sh.name == "" {
			return nil, failf("invalid --dir syntax: for multiple directory shares each one of them should be named")
		}
	}
	return out, nil
}

// mountShares lays out what macOS in the VM sees of the shares, under the
// VM's guest root (build.GuestRoot): the automount tag's shares at
// /Volumes/My Shared Files, an unnamed single share as that directory
// itself, named ones under their names. A share on another tag is not
// mounted by macOS: the guest would mount it with mount_virtiofs.
func (e *env) mountShares(name string, shares []share) error {
	root := build.GuestRoot(e.home, name)
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	mnt := filepath.Join(root, build.SharedFilesDir)
	if err := os.MkdirAll(filepath.Dir(mnt), 0o700); err != nil {
		return err
	}
	for _, sh := range shares {
		if sh.tag != automountTag {
			continue
		}
		if sh.name == "" {
			return os.Symlink(sh.path, mnt)
		}
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return err
		}
		if err := os.Symlink(sh.path, filepath.Join(mnt, sh.name)); err != nil {
			return err
		}
	}
	return nil
}

// lastExit records how the VM last stopped: "shutdown" (the guest shut
// down), "forced" (SIGINT, tart stop's way), "suspended" or "killed" (a
// suspend that could not save the VM).
func (e *env) lastExit(name, how string) {
	_ = os.WriteFile(filepath.Join(e.vmDir(name), build.LastExitFile), []byte(how), 0o600)
}

// suspend imitates tart suspend (Suspend.swift): it signals SIGUSR1 to the
// tart run holding the VM's lock and returns at once. tart wraps its
// message in RuntimeError.VMNotRunning's own, so it says "VM" twice.
func (e *env) suspend(name string) error {
	if _, err := e.readConfig(name); err != nil {
		return err
	}
	pid := e.lockOwner(name)
	if pid == 0 {
		return &tartError{2, fmt.Sprintf(`VM "VM "%s" is not running" is not running`, name)}
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return failf(`Failed to suspend the VM: failed to send SIGUSR1 signal to the "tart run" process running VM "%s"`, name)
	}
	return nil
}

func (e *env) stop(name string, opts map[string][]string) error {
	if _, err := e.readConfig(name); err != nil {
		return err
	}
	pid := e.lockOwner(name)
	if pid == 0 {
		// tart's Stop.swift: a suspended VM is stopped by removing its
		// saved state; its next run boots cold.
		if _, err := os.Stat(filepath.Join(e.vmDir(name), build.StateFile)); err == nil {
			return os.Remove(filepath.Join(e.vmDir(name), build.StateFile))
		}
		return &tartError{2, fmt.Sprintf("VM %q is not running", name)}
	}
	timeout := 30
	for _, k := range []string{"timeout", "t"} {
		if v := opts[k]; len(v) > 0 {
			if n, err := strconv.Atoi(v[len(v)-1]); err == nil {
				timeout = n
			}
		}
	}
	_ = syscall.Kill(pid, syscall.SIGINT)
	deadline := time.Now().Add(time.Duration(timeout) * time.Second)
	for time.Now().Before(deadline) {
		if e.lockOwner(name) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return failf("failed to forcefully terminate the VM %q: %v", name, err)
	}
	return nil
}

func (e *env) delete(name string) error {
	if _, err := e.readConfig(name); err != nil {
		return err
	}
	if e.lockOwner(name) > 0 {
		return failf("VM %q is running", name)
	}
	return os.RemoveAll(e.vmDir(name))
}
