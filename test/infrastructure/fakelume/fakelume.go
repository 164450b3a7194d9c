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

package fakelume

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macvirt/macvirt/test/infrastructure/gocmd"
)

// LimitText is what the fake logs when a start fails on the framework's VM
// limit: the description of VZErrorDomain code 6 as macOS words it.
const LimitText = "The maximum supported number of active virtual machines has been reached."

// ManifestFetchFailed is lume's error text for a pull whose image the
// registry does not have; like lume's, it does not name the image.
const ManifestFetchFailed = "Failed to fetch image manifest from registry."

// Options are the fake's knobs.
type Options struct {
	// MaxVMs is the framework's limit on running VMs; 0 means 2. The host
	// status always reports max_vms 2, as lume hard-codes it.
	MaxVMs int
	// StartDelay is how long a started VM stays "provisioning" before it
	// runs (or fails); 0 starts it at once, still after the 202.
	StartDelay time.Duration
	// Stuck makes every start fail with the VM-limit error, even with no VM
	// running, as a host whose framework count is stuck; the host status
	// still computes its slots from the running VMs, as lume's does.
	Stuck bool
	// Images are the references the fake registry has, as
	// "registry/organization/image:tag"; a pull of another fails.
	Images []string
	// NoLogs makes GET /lume/logs answer as a lume without log files (one
	// not started as a daemon).
	NoLogs bool
	// ImageSizes are the images' sizes in bytes; an image with none pulls
	// at once.
	ImageSizes map[string]int64
	// PullBytesPerSecond is the registry link's speed: an asynchronous
	// pull takes its image's size over it. 0 pulls at once.
	PullBytesPerSecond int64
	// GuestUser and GuestPassword are the administrator of the images'
	// guests, which "lume shutdown" logs in as (lume's own images':
	// lume/lume, the default when empty). NoSSH makes the guests' Remote
	// Login off.
	GuestUser, GuestPassword string
	NoSSH                    bool
}

// Server is a fake lume: an http.Handler for the /lume routes the macvirt
// driver uses, keeping each VM as a JSON file in Dir/<name>/.
type Server struct {
	// Dir holds the VMs' state files and the image cache.
	Dir string

	mu          sync.Mutex
	opts        Options
	forcedStops int
	// sshShutdowns counts the guests "lume shutdown" shut down.
	sshShutdowns int
	log          strings.Builder
	nextIP       int
	timers       []*time.Timer
	// pulls are the asynchronous pulls under way or failed, by VM name.
	pulls map[string]*asyncPull
}

// vmState is one VM's file.
type vmState struct {
	Name        string   `json:"name"`
	CPUCount    int      `json:"cpuCount"`
	MemorySize  uint64   `json:"memorySize"`
	DiskSize    uint64   `json:"diskSize"`
	Display     string   `json:"display"`
	Status      string   `json:"status"`
	IPAddress   string   `json:"ipAddress,omitempty"`
	SharedDirs  []string `json:"sharedDirs,omitempty"`
	SourceImage string   `json:"sourceImage"`
	// MAC is the VM's MAC address (lume's config.json "macAddress").
	MAC string `json:"macAddress"`
}

// New returns a fake lume keeping its files in dir.
func New(dir string, opts Options) *Server {
	s := &Server{Dir: dir, opts: opts, nextIP: 2}
	return s
}

// Start serves s on a new httptest.Server closed at the test's end.
func Start(t testing.TB, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		ts.Close()
		s.stopTimers()
	})
	return ts
}

// SetOptions replaces the fake's knobs; VMs keep their state.
func (s *Server) SetOptions(opts Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts = opts
}

// ForcedStops is how many times POST /lume/vms/:name/stop was called, so a
// test can prove nothing forced a VM off.
func (s *Server) ForcedStops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forcedStops
}

// Log is everything the fake logged, as lume's daemon log would hold it.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// GuestShutdown makes a running VM stop as if macOS shut itself down (the
// guest agent's shutdown); it is an error when the VM does not run.
func (s *Server) GuestShutdown(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.read(name)
	if err != nil {
		return err
	}
	if vm.Status != "running" {
		return fmt.Errorf("fakelume: VM %s is %s, not running", name, vm.Status)
	}
	vm.Status = "stopped"
	vm.IPAddress = ""
	s.logf("INFO", "VM lifecycle ended", name, "")
	return s.write(vm)
}

// sshShutdown plays what "lume shutdown NAME" does to the guest (the fake
// lume command asks it here): lume's checks in its words (SSHError), a
// login as the image's administrator, and sudo shutdown -h now, after
// which macOS shuts down as it does when asked from inside.
func (s *Server) sshShutdown(w http.ResponseWriter, r *http.Request, name string) {
	var req struct{ User, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		badRequest(w, "Invalid request body")
		return
	}
	vm, err := s.read(name)
	switch {
	case err != nil:
		badRequest(w, fmt.Sprintf("VM '%s' not found", name))
		return
	case vm.Status != "running":
		badRequest(w, fmt.Sprintf("VM '%s' is not running", name))
		return
	case vm.IPAddress == "":
		badRequest(w, fmt.Sprintf("VM '%s' has no IP address. Wait for it to boot completely.", name))
		return
	case s.opts.NoSSH:
		badRequest(w, fmt.Sprintf("SSH is not available on VM '%s'. Ensure SSH/Remote Login is enabled.", name))
		return
	}
	user, password := s.opts.GuestUser, s.opts.GuestPassword
	if user == "" {
		user, password = "lume", "lume"
	}
	if req.User != user || req.Password != password {
		badRequest(w, "SSH authentication failed. Check username and password.")
		return
	}
	s.sshShutdowns++
	vm.Status, vm.IPAddress = "stopped", ""
	s.logf("INFO", "VM lifecycle ended", name, "")
	if err := s.write(vm); err != nil {
		badRequest(w, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "ok"})
}

// SSHShutdowns counts the guests "lume shutdown" shut down.
func (s *Server) SSHShutdowns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sshShutdowns
}

// BuildCLI builds the fake lume command (lumecli) into dir as "lume";
// it reaches the server at FAKELUME_URL.
func BuildCLI(dir string) (string, error) {
	return gocmd.Build("github.com/macvirt/macvirt/test/infrastructure/fakelume/lumecli", dir, "lume", "the fake lume command")
}

// SetRunning puts a VM into the running state directly, creating it when
// missing, so a test can set up a host with running VMs.
func (s *Server) SetRunning(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.read(name)
	if errors.Is(err, fs.ErrNotExist) {
		vm = s.newVM(name, "")
	} else if err != nil {
		return err
	}
	vm.Status = "running"
	vm.IPAddress = s.ip()
	return s.write(vm)
}

func (s *Server) stopTimers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.timers {
		t.Stop()
	}
}

func (s *Server) maxVMs() int {
	if s.opts.MaxVMs > 0 {
		return s.opts.MaxVMs
	}
	return 2
}

func (s *Server) ip() string {
	ip := fmt.Sprintf("192.168.64.%d", s.nextIP)
	s.nextIP++
	return ip
}

// logf appends a line in lume's log format: "[time] LEVEL: message" and
// key=value metadata.
func (s *Server) logf(level, msg, name, errText string) {
	fmt.Fprintf(&s.log, "[%s] %s: %s name=%s", time.Now().UTC().Format(time.RFC3339), level, msg, name)
	if errText != "" {
		fmt.Fprintf(&s.log, " error=%s", errText)
	}
	s.log.WriteString("\n")
}

func (s *Server) vmFile(name string) string {
	return filepath.Join(s.Dir, name, "vm.json")
}

func (s *Server) read(name string) (vmState, error) {
	var vm vmState
	if !validName(name) {
		return vm, fs.ErrNotExist
	}
	b, err := os.ReadFile(s.vmFile(name))
	if err != nil {
		return vm, err
	}
	err = json.Unmarshal(b, &vm)
	return vm, err
}

// validName keeps a VM's files inside Dir.
func validName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`) && name != "." && name != ".." && name != "cache"
}

func (s *Server) write(vm vmState) error {
	if !validName(vm.Name) {
		return fmt.Errorf("fakelume: bad VM name %q", vm.Name)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, vm.Name), 0o750); err != nil {
		return err
	}
	b, err := json.Marshal(vm)
	if err != nil {
		return err
	}
	return os.WriteFile(s.vmFile(vm.Name), b, 0o600) //nolint:gosec // G703: validName keeps the path in Dir.
}

func (s *Server) all() ([]vmState, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, err
	}
	var out []vmState
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		vm, err := s.read(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, vm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Server) running() (int, error) {
	vms, err := s.all()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, vm := range vms {
		if vm.Status == "running" {
			n++
		}
	}
	return n, nil
}

// newVM is a VM pulled from image. lume 0.5.3's pullImage gives every
// pulled VM a new random MAC address (VZMACAddress.randomLocallyAdministered,
// "to ensure uniqueness"), whatever the image's config says.
func (s *Server) newVM(name, image string) vmState {
	mac := make([]byte, 6)
	_, _ = rand.Read(mac)
	mac[0] = mac[0]&0xfe | 0x02
	return vmState{
		Name: name, CPUCount: 4, MemorySize: 8 << 30, DiskSize: 50 << 30,
		Display: "1024x768", Status: "stopped", SourceImage: image,
		MAC: fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]),
	}
}

// details is lume's VMDetails JSON: every key present, null when absent.
func details(vm vmState) map[string]any {
	d := map[string]any{
		"name":                  vm.Name,
		"os":                    "macOS",
		"cpuCount":              vm.CPUCount,
		"memorySize":            vm.MemorySize,
		"diskSize":              map[string]any{"allocated": vm.DiskSize / 4, "total": vm.DiskSize},
		"display":               vm.Display,
		"status":                vm.Status,
		"provisioningOperation": nil,
		"vncUrl":                nil,
		"ipAddress":             nil,
		"sshAvailable":          nil,
		"locationName":          "home",
		"sharedDirectories":     nil,
		"networkMode":           "nat",
		"downloadProgress":      nil,
	}
	if vm.Status == "running" {
		d["ipAddress"] = vm.IPAddress
		d["sshAvailable"] = true
		d["vncUrl"] = "vnc://:fake@127.0.0.1:5900"
	}
	return d
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"message": msg})
}

func notFound(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "Not found")
}

// ServeHTTP routes as lume does: on the raw request target split at "/",
// query string included, so "/lume/vms?x=y" matches no route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.RequestURI(), "/"), "/")
	if len(parts) < 2 || (parts[0] != "lume" && parts[0] != "fake") {
		notFound(w)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && len(parts) == 2 && parts[1] == "vms":
		s.list(w)
	case r.Method == http.MethodGet && len(parts) == 3 && parts[1] == "vms":
		s.get(w, vmName(parts[2]))
	case r.Method == http.MethodPatch && len(parts) == 3 && parts[1] == "vms":
		s.patch(w, r, vmName(parts[2]))
	case r.Method == http.MethodDelete && len(parts) == 3 && parts[1] == "vms":
		s.delete(w, vmName(parts[2]))
	case r.Method == http.MethodPost && len(parts) == 4 && parts[1] == "vms" && parts[3] == "run":
		s.run(w, r, vmName(parts[2]))
	case r.Method == http.MethodPost && len(parts) == 4 && parts[1] == "vms" && parts[3] == "stop":
		s.stop(w, vmName(parts[2]))
	case r.Method == http.MethodPost && len(parts) == 2 && parts[1] == "pull":
		s.pull(w, r)
	case r.Method == http.MethodPost && len(parts) == 3 && parts[1] == "pull" && parts[2] == "start":
		s.pullStart(w, r)
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "fake" && parts[1] == "guest" && parts[3] == "shutdown":
		s.sshShutdown(w, r, vmName(parts[2]))
	case r.Method == http.MethodGet && len(parts) == 2 && parts[1] == "images":
		s.images(w)
	case r.Method == http.MethodGet && len(parts) == 3 && parts[1] == "host" && parts[2] == "status":
		s.hostStatus(w)
	case r.Method == http.MethodGet && len(parts) == 2 && parts[1] == "logs":
		s.logs(w)
	default:
		notFound(w)
	}
}

// vmName takes the name from a path segment, dropping a query string as
// lume's parameter extraction does.
func vmName(seg string) string {
	seg, _, _ = strings.Cut(seg, "?")
	if n, err := urlUnescape(seg); err == nil {
		return n
	}
	return seg
}

func (s *Server) list(w http.ResponseWriter) {
	vms, err := s.all()
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	out := make([]map[string]any, 0, len(vms))
	for _, vm := range vms {
		out = append(out, details(vm))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, name string) {
	if p := s.pulls[name]; p != nil {
		if p.err != "" {
			badRequest(w, fmt.Sprintf("Pull failed for '%s': %s", name, p.err))
			return
		}
		pct := 0.0
		if p.took > 0 {
			pct = min(100*float64(time.Since(p.started))/float64(p.took), 99.9)
		}
		writeJSON(w, http.StatusOK, map[string]any{"name": name, "status": "pulling", "downloadProgress": pct})
		return
	}
	vm, err := s.read(name)
	if err != nil {
		badRequest(w, "Virtual machine not found: "+name)
		return
	}
	writeJSON(w, http.StatusOK, details(vm))
}

func (s *Server) patch(w http.ResponseWriter, r *http.Request, name string) {
	var req struct {
		CPU    *int    `json:"cpu"`
		Memory *string `json:"memory"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		badRequest(w, "Invalid request body")
		return
	}
	vm, err := s.read(name)
	if err != nil {
		badRequest(w, "Virtual machine not found: "+name)
		return
	}
	if req.CPU != nil {
		vm.CPUCount = *req.CPU
	}
	if req.Memory != nil {
		n, err := parseSize(*req.Memory)
		if err != nil {
			badRequest(w, err.Error())
			return
		}
		vm.MemorySize = n
	}
	if err := s.write(vm); err != nil {
		badRequest(w, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": "VM settings updated successfully"})
}

func (s *Server) delete(w http.ResponseWriter, name string) {
	vm, err := s.read(name)
	if err != nil {
		badRequest(w, "Virtual machine not found: "+name)
		return
	}
	if vm.Status == "running" {
		// lume deletes a running VM's files too; the driver never asks.
		s.logf("INFO", "Deleting a running VM", name, "")
	}
	if err := os.RemoveAll(filepath.Join(s.Dir, name)); err != nil { //nolint:gosec // G703: read checked the name.
		badRequest(w, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) run(w http.ResponseWriter, r *http.Request, name string) {
	var req struct {
		NoDisplay         *bool `json:"noDisplay"`
		SharedDirectories []struct {
			HostPath string `json:"hostPath"`
			ReadOnly *bool  `json:"readOnly"`
		} `json:"sharedDirectories"`
	}
	if body, _ := io.ReadAll(r.Body); len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			badRequest(w, "Invalid run request body")
			return
		}
	}
	var dirs []string
	for _, d := range req.SharedDirectories {
		if st, err := os.Stat(d.HostPath); err != nil || !st.IsDir() {
			badRequest(w, "Host path does not exist or is not a directory: "+d.HostPath)
			return
		}
		mode := "rw"
		if d.ReadOnly != nil && *d.ReadOnly {
			mode = "ro"
		}
		dirs = append(dirs, d.HostPath+":"+mode)
	}
	s.logf("INFO", "Starting VM in background", name, "")
	// The start runs detached: the 202 says nothing about its outcome.
	delay := s.opts.StartDelay
	if vm, err := s.read(name); err == nil && vm.Status == "stopped" {
		vm.Status = "provisioning"
		vm.SharedDirs = dirs
		_ = s.write(vm)
	}
	s.timers = append(s.timers, time.AfterFunc(delay, func() { s.finishStart(name) }))
	writeJSON(w, http.StatusAccepted, map[string]string{
		"message": "VM start initiated", "name": name, "status": "pending",
	})
}

// finishStart ends a detached start: the VM runs, or the failure goes to
// the log only, as lume's does.
func (s *Server) finishStart(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, err := s.read(name)
	if err != nil {
		s.logf("ERROR", "Failed to start VM in background task", name, "Virtual machine not found: "+name)
		return
	}
	if vm.Status == "running" {
		s.logf("ERROR", "Failed to start VM in background task", name, "Virtual machine already running: "+name)
		return
	}
	n, _ := s.running()
	if s.opts.Stuck || n >= s.maxVMs() {
		vm.Status = "stopped"
		_ = s.write(vm)
		s.logf("ERROR", "Failed in VM.run", name, LimitText)
		s.logf("ERROR", "Failed to start VM in background task", name, LimitText)
		return
	}
	vm.Status = "running"
	vm.IPAddress = s.ip()
	_ = s.write(vm)
	s.mountShares(vm)
	s.logf("INFO", "VM started successfully", name, "")
}

// GuestRoot is what the guest of a fake VM sees as "/" of its shares.
func (s *Server) GuestRoot(name string) string { return filepath.Join(s.Dir, name, "guest-root") }

// mountShares lays out what macOS in the VM sees of its shared
// directories, as lume 0.5.3 shares them (VMVirtualizationService's
// createDirectoryShare): one device on the automount tag, a
// multiple-directory share keyed by each host path's last element, plus
// lume's own hidden .lume-live-share; macOS shows them under
// /Volumes/My Shared Files.
func (s *Server) mountShares(vm vmState) {
	root := s.GuestRoot(vm.Name)
	_ = os.RemoveAll(root)
	mnt := filepath.Join(root, "Volumes", "My Shared Files")
	if err := os.MkdirAll(filepath.Join(mnt, ".lume-live-share"), 0o700); err != nil {
		return
	}
	seen := map[string]int{}
	for _, d := range vm.SharedDirs {
		path := d[:strings.LastIndex(d, ":")]
		key := filepath.Base(path)
		if seen[key]++; seen[key] > 1 {
			key = fmt.Sprintf("%s (%d)", key, seen[key])
		}
		_ = os.Symlink(path, filepath.Join(mnt, key))
	}
}

func (s *Server) stop(w http.ResponseWriter, name string) {
	s.forcedStops++
	vm, err := s.read(name)
	if err != nil {
		badRequest(w, "Virtual machine not found: "+name)
		return
	}
	if vm.Status != "running" {
		badRequest(w, "Virtual machine not running: "+name)
		return
	}
	vm.Status = "stopped"
	vm.IPAddress = ""
	_ = s.write(vm)
	writeJSON(w, http.StatusOK, map[string]string{"message": "VM stopped successfully"})
}

// pullRequest is lume's pull body.
type pullRequest struct {
	Image        string  `json:"image"`
	Name         *string `json:"name"`
	Registry     *string `json:"registry"`
	Organization *string `json:"organization"`
}

// parsePull reads a pull's body into the VM's name, the image's name and
// tag, and the reference; a message when lume would refuse it at once.
func parsePull(r *http.Request) (name, image, ref, org string, problem string) {
	var req pullRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return "", "", "", "", "Invalid request body"
	}
	parts := strings.Split(req.Image, ":")
	if len(parts) != 2 {
		return "", "", "", "", "Invalid image format. Expected format: name:tag"
	}
	registry, org := "ghcr.io", "trycua"
	if req.Registry != nil {
		registry = *req.Registry
	}
	if req.Organization != nil {
		org = *req.Organization
	}
	name = parts[0] + "_" + parts[1]
	if req.Name != nil {
		name = *req.Name
	}
	return name, parts[0], registry + "/" + org + "/" + req.Image, org, ""
}

// pulled makes the VM name from ref, as a pull that ended does; the
// message of its failure otherwise. Under s.mu.
func (s *Server) pulled(name, image, ref, org string) string {
	if _, err := s.read(name); err == nil {
		return "Virtual machine already exists with name: " + name
	}
	if !slices.Contains(s.opts.Images, ref) {
		s.logf("ERROR", "Failed to pull image", name, ManifestFetchFailed)
		return ManifestFetchFailed
	}
	if err := s.cache(org, image, ref); err != nil {
		return err.Error()
	}
	if err := s.write(s.newVM(name, ref)); err != nil {
		return err.Error()
	}
	return ""
}

// pull is POST /lume/pull: the whole pull within the request.
func (s *Server) pull(w http.ResponseWriter, r *http.Request) {
	name, image, ref, org, problem := parsePull(r)
	if problem == "" {
		problem = s.pulled(name, image, ref, org)
	}
	if problem != "" {
		badRequest(w, problem)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"message": "Image pulled successfully", "image": image, "name": name,
	})
}

// asyncPull is one POST /lume/pull/start under way, or failed.
type asyncPull struct {
	started time.Time
	took    time.Duration
	err     string
}

// pullStart is POST /lume/pull/start, as lume 0.5.3's handlePullStart: 202
// at once; the pull takes the image's size over the link's speed, and
// until it ends GET /lume/vms/NAME answers "pulling" with its
// downloadProgress; a failure is answered there, 400 "Pull failed for
// 'NAME': ...", until the name is pulled again. lume has no way to cancel
// it.
func (s *Server) pullStart(w http.ResponseWriter, r *http.Request) {
	name, image, ref, org, problem := parsePull(r)
	if problem == "Invalid request body" {
		badRequest(w, problem)
		return
	}
	var took time.Duration
	if size := s.opts.ImageSizes[ref]; size > 0 && s.opts.PullBytesPerSecond > 0 {
		took = time.Duration(float64(size) / float64(s.opts.PullBytesPerSecond) * float64(time.Second))
	}
	if s.pulls == nil {
		s.pulls = map[string]*asyncPull{}
	}
	p := &asyncPull{started: time.Now(), took: took}
	s.pulls[name] = p
	s.timers = append(s.timers, time.AfterFunc(took, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pulls[name] != p {
			return
		}
		if problem == "" {
			problem = s.pulled(name, image, ref, org)
		}
		if problem != "" {
			p.err = problem
			return
		}
		delete(s.pulls, name)
	}))
	writeJSON(w, http.StatusAccepted, map[string]string{"message": "Pull started", "name": name})
}

// cache records a pulled image as lume 0.5.3's ImageContainerRegistry
// does: a directory per manifest, Dir/cache/<org>/<manifestId> (the
// manifest's digest with "_" for ":"), holding metadata.json with the
// image's name without its tag; the other versions of that name are
// removed (cleanupOldVersions), so a Mac keeps one per name.
func (s *Server) cache(org, image, ref string) error {
	id := ManifestID(ref)
	orgDir := filepath.Join(s.Dir, "cache", org)
	entries, _ := os.ReadDir(orgDir)
	for _, e := range entries {
		if e.Name() == id {
			continue
		}
		if m, err := readMetadata(filepath.Join(orgDir, e.Name())); err == nil && m.Image == image {
			_ = os.RemoveAll(filepath.Join(orgDir, e.Name()))
		}
	}
	if err := os.MkdirAll(filepath.Join(orgDir, id), 0o750); err != nil {
		return err
	}
	b, err := json.Marshal(imageMetadata{Image: image, ManifestID: id, Timestamp: time.Now()})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(orgDir, id, "metadata.json"), b, 0o600)
}

// ManifestID is the fake registry's manifest id for an image reference,
// as lume names its cache directories: "sha256_" and a digest, which
// differs for every reference (a tag re-pushed is another reference to
// the fake: give it another tag).
func ManifestID(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return "sha256_" + hex.EncodeToString(sum[:])
}

// imageMetadata is lume's metadata.json of a cached image.
type imageMetadata struct {
	Image      string    `json:"image"`
	ManifestID string    `json:"manifestId"`
	Timestamp  time.Time `json:"timestamp"`
}

func readMetadata(dir string) (imageMetadata, error) {
	var m imageMetadata
	b, err := os.ReadFile(filepath.Join(dir, "metadata.json")) //nolint:gosec // G304: the fake's own cache.
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}

// images lists the cache as lume's GET /lume/images does: repository (the
// name without tag) and imageId (the manifest id's first 12 characters,
// "sha256_" and 5 of the digest), of the default organization only, as
// lume lists without a query string.
func (s *Server) images(w http.ResponseWriter) {
	orgDir := filepath.Join(s.Dir, "cache", "trycua")
	entries, _ := os.ReadDir(orgDir)
	out := []map[string]string{}
	for _, e := range entries {
		if m, err := readMetadata(filepath.Join(orgDir, e.Name())); err == nil {
			out = append(out, map[string]string{"repository": m.Image, "imageId": m.ManifestID[:12]})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i]["repository"]+out[i]["imageId"] < out[j]["repository"]+out[j]["imageId"]
	})
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) hostStatus(w http.ResponseWriter) {
	n, err := s.running()
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"status": "healthy", "vm_count": n, "max_vms": 2,
		"available_slots": max(0, 2-n), "version": "1.0.0",
	})
}

func (s *Server) logs(w http.ResponseWriter) {
	if s.opts.NoLogs {
		writeJSON(w, http.StatusOK, map[string]string{
			"info": "Info log file not found", "error": "Error log file not found",
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"info": s.log.String(), "error": ""})
}
