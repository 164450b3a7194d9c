package guestagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// Tasks run what the operator hands the agent (protocol v2): one at a
// time, in the order given, each exactly once per binding. Before a task's
// process starts, a record of it is written to disk and synced, so an agent
// that restarts (or a Mac that reboots) never runs it again: it finds the
// record, and either follows the task still running (its process group
// outlives the agent) or reports it as ended without an exit status.
//
// A task's directory, <Dir>/<id>, is the agent's (the user may enter it,
// not change it): the record (task.json, the agent's alone), the script
// (script.sh, the user's to read), the whole output (output.log, the
// user's, which stays on the Mac) and the exit status the shell that runs
// the script writes through a descriptor the agent opened (exit). The
// agent follows no link there. Files are placed, and the script run, by
// processes with the user's credentials, so a task can write nowhere its
// user could not.

// TaskUser is the account a task, or a file it places, belongs to.
type TaskUser struct {
	Name     string
	UID, GID int
	// Groups are the user's supplementary groups (admin, for sudo).
	Groups []int
	Home   string
}

// TaskHost is what tasks need of the operating system.
type TaskHost interface {
	// TaskUser looks a user up.
	TaskUser(name string) (TaskUser, error)
	// TaskPath is where a task's file of path (absolute) is placed: path
	// itself on a Mac; under a directory of its own in a simulation.
	TaskPath(path string) string
}

// TaskGrace is how long a task's process group has between SIGTERM and
// SIGKILL once it timed out or its binding ended.
var TaskGrace = 5 * time.Second

// taskPoll is how often a task no Wait can follow (one left running by an
// earlier agent) is looked at.
var taskPoll = 250 * time.Millisecond

// outputWindow is how much of the end of a task's output is read to make
// its tail.
const outputWindow = 64 << 10

// defaultTaskPath is the PATH a task starts with.
const defaultTaskPath = "/usr/local/bin:/opt/homebrew/bin:/usr/bin:/bin:/usr/sbin:/sbin"

// taskRecord is a task's record on disk.
type taskRecord struct {
	ID             string    `json:"id"`
	Binding        string    `json:"binding"`
	StartedAt      time.Time `json:"startedAt"`
	Boot           time.Time `json:"boot"`
	PID            int       `json:"pid,omitempty"`
	TimeoutSeconds int       `json:"timeoutSeconds"`
	Mask           []string  `json:"mask,omitempty"`

	State      guestprotocol.TaskState `json:"state"`
	ExitCode   *int                    `json:"exitCode,omitempty"`
	FinishedAt time.Time               `json:"finishedAt,omitzero"`
	OutputTail string                  `json:"outputTail,omitempty"`
	Message    string                  `json:"message,omitempty"`
}

// Tasks runs and remembers a guest's tasks. The zero value is not usable:
// set Dir and Host.
type Tasks struct {
	// Dir keeps a directory per task.
	Dir  string
	Host TaskHost
	Logf func(string, ...any)
	// Boot is when the guest booted (Facts.BootTime): a record of a task
	// started in an earlier boot can only be of a task that is gone.
	Boot time.Time
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	changed chan struct{}
	// abandoned: this runner is gone (Forget, Stop); it records and
	// starts nothing more.
	abandoned bool
	loaded    bool
	binding   string
	records   map[string]*taskRecord
	queue     []guestprotocol.Task
	running   string
	// stop ends the running task's process group early, with the message
	// and state to record.
	stop chan stopRequest
}

type stopRequest struct {
	state   guestprotocol.TaskState
	message string
}

// Forget makes the runner let go of its tasks as an agent that exits
// does: what runs keeps running, and nothing more is recorded or started
// by it. Another runner on the same directory takes over.
func (t *Tasks) Forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.abandoned = true
}

// Stop is a guest going down: the running task's process group is killed
// and nothing is recorded, as nothing is when the power goes; the runner
// of the next boot finds the task cut off.
func (t *Tasks) Stop() {
	t.mu.Lock()
	t.abandoned = true
	var pid int
	if rec := t.records[t.running]; rec != nil {
		pid = rec.PID
	}
	t.mu.Unlock()
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// SetBoot records when the guest booted, the first time it is told.
func (t *Tasks) SetBoot(boot time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.Boot.IsZero() {
		t.Boot = boot
	}
}

// Changed is signalled (without blocking, at most one pending signal) when
// a task starts or ends.
func (t *Tasks) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changedChan()
}

func (t *Tasks) changedChan() chan struct{} {
	if t.changed == nil {
		t.changed = make(chan struct{}, 1)
	}
	return t.changed
}

func (t *Tasks) signal() {
	select {
	case t.changedChan() <- struct{}{}:
	default:
	}
}

// sameBoot reports whether a record's boot is this one: boot times read
// from the system agree to well under bootSlack.
func (t *Tasks) sameBoot(boot time.Time) bool {
	d := boot.Sub(t.Boot)
	return d < bootSlack && d > -bootSlack
}

// bootSlack is how far two readings of one boot's time may differ.
const bootSlack = 2 * time.Second

func (t *Tasks) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

func (t *Tasks) logf(format string, args ...any) {
	if t.Logf != nil {
		t.Logf(format, args...)
	}
}

// Update takes the answer's binding and tasks: tasks of another binding
// that still run are stopped, and its tasks not taken yet are queued and
// started in order.
func (t *Tasks) Update(binding string, tasks []guestprotocol.Task) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.abandoned {
		return
	}
	t.load()
	// Only another claim ends a binding: an answer without one (a machine
	// released, or briefly not trusted with its claim) stops and forgets
	// nothing, so the binding's tasks, if it comes back, are not run again.
	if binding != "" && binding != t.binding {
		t.binding = binding
		if err := t.saveBinding(); err != nil {
			t.logf("recording the binding: %v", err)
		}
		t.queue = nil
		if id := t.running; id != "" && t.records[id].Binding != binding {
			t.stopRunning(guestprotocol.TaskFailed, "the Mac was bound to another claim")
		}
		t.forgetOtherBindings()
	}
	if binding == "" {
		tasks = nil
	}
	for _, task := range tasks {
		if t.records[task.ID] != nil || queued(t.queue, task.ID) || !validTaskID(task.ID) {
			continue
		}
		t.queue = append(t.queue, task)
	}
	t.startNext()
}

func queued(q []guestprotocol.Task, id string) bool {
	for _, task := range q {
		if task.ID == id {
			return true
		}
	}
	return false
}

func validTaskID(id string) bool {
	return id != "" && len(id) <= guestprotocol.MaxTaskIDBytes && !strings.ContainsAny(id, "/\\") && id != "." && id != ".."
}

// Reports are the tasks of the current binding, in the order they started.
func (t *Tasks) Reports() []guestprotocol.TaskReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.load()
	var out []guestprotocol.TaskReport
	for _, rec := range t.records {
		if rec.Binding != t.binding || t.binding == "" {
			continue
		}
		r := guestprotocol.TaskReport{ID: rec.ID, State: rec.State, ExitCode: rec.ExitCode, StartedAt: rec.StartedAt,
			OutputTail: rec.OutputTail, Message: rec.Message}
		if rec.State == guestprotocol.TaskRunning {
			r.OutputTail = t.tail(rec)
		} else {
			r.DurationMillis = rec.FinishedAt.Sub(rec.StartedAt).Milliseconds()
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	if len(out) > guestprotocol.MaxTasks {
		out = out[len(out)-guestprotocol.MaxTasks:]
	}
	return out
}

// load reads the records once, and follows or closes those of tasks that
// had not finished when the agent last stopped.
func (t *Tasks) load() {
	if t.loaded {
		return
	}
	t.loaded = true
	t.records = map[string]*taskRecord{}
	if raw, err := readOwn(filepath.Join(t.Dir, bindingFile), 256); err == nil {
		t.binding = strings.TrimSpace(string(raw))
	}
	entries, err := os.ReadDir(t.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.logf("reading the task records in %s: %v", t.Dir, err)
	}
	for _, e := range entries {
		raw, err := readOwn(filepath.Join(t.Dir, e.Name(), taskFile), 1<<20)
		if err != nil {
			continue
		}
		rec := &taskRecord{}
		if err := json.Unmarshal(raw, rec); err != nil || rec.ID != e.Name() {
			continue
		}
		t.records[rec.ID] = rec
		if rec.State != guestprotocol.TaskRunning {
			continue
		}
		switch {
		case !t.sameBoot(rec.Boot):
			t.finish(rec, guestprotocol.TaskFailed, nil, "the Mac restarted while it ran; a task runs once and is not run again")
		case !processAlive(rec.PID):
			if code, ok := t.exitStatus(rec); ok {
				t.finishExited(rec, code)
			} else {
				t.finish(rec, guestprotocol.TaskFailed, nil, "it ended while the agent was not running, leaving no exit status")
			}
		default:
			// Still running: follow it.
			t.running = rec.ID
			t.stop = make(chan stopRequest, 1)
			go t.follow(rec, nil, t.stop)
		}
	}
}

// forgetOtherBindings removes the directories of tasks of other bindings
// that have finished: the next tenant finds no earlier tenant's output.
func (t *Tasks) forgetOtherBindings() {
	for id, rec := range t.records {
		if rec.Binding == t.binding || rec.State == guestprotocol.TaskRunning {
			continue
		}
		if err := os.RemoveAll(filepath.Join(t.Dir, id)); err != nil {
			t.logf("removing task %s of an earlier binding: %v", id, err)
			continue
		}
		delete(t.records, id)
	}
}

// startNext starts the first queued task when none runs.
func (t *Tasks) startNext() {
	for t.running == "" && len(t.queue) > 0 {
		task := t.queue[0]
		t.queue = t.queue[1:]
		t.start(task)
	}
}

// start records the task and starts it; a task that cannot start is
// recorded as Failed.
func (t *Tasks) start(task guestprotocol.Task) {
	dir := filepath.Join(t.Dir, task.ID)
	rec := &taskRecord{ID: task.ID, Binding: t.binding, StartedAt: t.now(), Boot: t.Boot, TimeoutSeconds: task.TimeoutSeconds,
		Mask: task.Mask, State: guestprotocol.TaskRunning}
	t.records[task.ID] = rec
	if err := os.MkdirAll(t.Dir, 0o711); err != nil { //nolint:gosec // the task's user enters it to run its script.
		t.finish(rec, guestprotocol.TaskFailed, nil, "making the task directory: "+err.Error())
		return
	}
	if err := os.Mkdir(dir, 0o711); err != nil { //nolint:gosec // the task's user enters it to run its script.
		t.finish(rec, guestprotocol.TaskFailed, nil, "making its directory: "+err.Error())
		return
	}
	// The record is on disk before anything of the task runs.
	if err := t.save(rec); err != nil {
		delete(t.records, task.ID)
		_ = os.RemoveAll(dir)
		t.logf("recording task %s failed; it is not started: %v", task.ID, err)
		return
	}
	cmd, err := t.launch(task, dir)
	if err != nil {
		t.finish(rec, guestprotocol.TaskFailed, nil, err.Error())
		return
	}
	rec.PID = cmd.Process.Pid
	if err := t.save(rec); err != nil {
		t.logf("recording the pid of task %s: %v", task.ID, err)
	}
	t.running = task.ID
	t.stop = make(chan stopRequest, 1)
	t.logf("task %s started as %s (pid %d)", task.ID, task.User, rec.PID)
	t.signal()
	go t.follow(rec, cmd, t.stop)
}

// launch places the files and starts the script in a process group of its
// own, as its user.
func (t *Tasks) launch(task guestprotocol.Task, dir string) (*exec.Cmd, error) {
	user, err := t.user(task.User)
	if err != nil {
		return nil, err
	}
	for _, f := range task.Files {
		if err := t.place(f, task.User); err != nil {
			return nil, err
		}
	}
	// The directory is the agent's: the user cannot put a link or a pipe
	// where the agent reads or writes. The script is the user's to read
	// (the shell opens it as the user), the output the user's to write (the
	// shell's standard output and error are a file the agent opened), and
	// the exit status is written through a descriptor the agent opened, so
	// an agent that restarts while the script runs still learns it.
	script, err := createIn(dir, scriptFile, []byte(task.Script), 0o500, user)
	if err != nil {
		return nil, fmt.Errorf("writing the script: %w", err)
	}
	_ = script.Close()
	out, err := createIn(dir, outputFile, nil, 0o600, user)
	if err != nil {
		return nil, fmt.Errorf("making the output file: %w", err)
	}
	defer func() { _ = out.Close() }()
	exit, err := createIn(dir, exitFile, nil, 0o600, TaskUser{UID: os.Geteuid(), GID: os.Getegid()})
	if err != nil {
		return nil, fmt.Errorf("making the exit-status file: %w", err)
	}
	defer func() { _ = exit.Close() }()
	const wrapper = `/bin/sh "$1" 3>&- </dev/null; s=$?; echo "$s" >&3; exit "$s"`
	cmd := exec.Command("/bin/sh", "-c", wrapper, "macvirt-task", filepath.Join(dir, scriptFile)) //nolint:gosec // the operator's task, run as its user.
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = out, out, []*os.File{exit}
	cmd.Dir = user.Home
	cmd.Env = taskEnv(task, user)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setCredential(cmd, user)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the script: %w", err)
	}
	return cmd, nil
}

// The files of a task's directory.
const (
	taskFile   = "task.json"
	scriptFile = "script.sh"
	outputFile = "output.log"
	exitFile   = "exit"
)

// createIn creates dir/name, which must not exist, without following a
// link, writes content, and gives it to user with mode.
func createIn(dir, name string, content []byte, mode os.FileMode, user TaskUser) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600) //nolint:gosec // the agent's own directory.
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(content); err != nil {
		_ = f.Close()
		return nil, err
	}
	if os.Geteuid() == 0 && (user.UID != 0 || user.GID != 0) {
		if err := f.Chown(user.UID, user.GID); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// user looks a task's user up.
func (t *Tasks) user(name string) (TaskUser, error) {
	u, err := t.Host.TaskUser(name)
	if err != nil {
		return TaskUser{}, fmt.Errorf("the user %q: %w", name, err)
	}
	return u, nil
}

// CheckAccount is what a TaskHost of real accounts holds a task's user
// to: only "root" is uid 0 (the operator decides who may ask for it), and
// any other name is a person's account (uid minUID or more), never a
// system account or root under another name (on a volume that ignores
// case, /Users/shared is root's /Users/Shared).
func CheckAccount(name string, uid, minUID int) error {
	switch {
	case name == RootUser && uid == 0:
		return nil
	case name == RootUser:
		return fmt.Errorf("refusing the user root: it is uid %d, not 0", uid)
	case uid < minUID:
		return fmt.Errorf("refusing the user %q: it is uid %d, a system account (a task runs as root only as \"root\", or as a person's account, uid %d or more)", name, uid, minUID)
	}
	return nil
}

// RootUser is the one name a task runs as uid 0 under.
const RootUser = "root"

// taskEnv is the script's environment: the user's basics, then the task's.
func taskEnv(task guestprotocol.Task, user TaskUser) []string {
	env := []string{"HOME=" + user.Home, "USER=" + user.Name, "LOGNAME=" + user.Name, "SHELL=/bin/sh",
		"PATH=" + defaultTaskPath, "LANG=en_US.UTF-8", "MACVIRT_TASK_ID=" + task.ID}
	for _, e := range task.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	return env
}

// place writes one file with the owner's rights: a shell running as the
// owner makes the directories, writes a temporary file beside the target
// and renames it over the target, so the file is whole or absent, and
// placed only where its owner could place it.
func (t *Tasks) place(f guestprotocol.File, defaultOwner string) error {
	owner := f.Owner
	if owner == "" {
		owner = defaultOwner
	}
	user, err := t.user(owner)
	if err != nil {
		return fmt.Errorf("the owner of %s: %w", f.Path, err)
	}
	if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path {
		return fmt.Errorf("refusing the file path %q: it must be absolute and clean", f.Path)
	}
	// Listed before it is written, so a disk captured as an image sheds
	// it even if the agent stopped half-way (generalize.go).
	if err := recordPlaced(t.Dir, f.Path); err != nil {
		return fmt.Errorf("recording %s in the placed-files ledger: %w", f.Path, err)
	}
	target := t.Host.TaskPath(f.Path)
	const placer = `umask 077; mkdir -p -- "$(dirname -- "$1")" && cat >"$1.macvirt-tmp" && chmod "$2" "$1.macvirt-tmp" && mv -f "$1.macvirt-tmp" "$1"`
	cmd := exec.Command("/bin/sh", "-c", placer, "macvirt-place", target, strconv.FormatUint(uint64(f.Mode&0o777), 8)) //nolint:gosec // run as the file's owner.
	cmd.Stdin = bytes.NewReader(f.Content)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + user.Home}
	setCredential(cmd, user)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("placing %s as %s: %w: %s", f.Path, owner, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// follow waits for the running task to end, kills its process group when
// it outlives its timeout or is stopped, and records how it ended. cmd is
// nil for a task an earlier agent started.
func (t *Tasks) follow(rec *taskRecord, cmd *exec.Cmd, stop chan stopRequest) {
	done := make(chan struct{})
	if cmd != nil {
		go func() { _ = cmd.Wait(); close(done) }()
	} else {
		// Not the agent's child: follow the shell that runs the script
		// (what it left running in the background is not the task).
		go func() {
			for processAlive(rec.PID) {
				if _, ok := t.exitStatus(rec); ok {
					break
				}
				time.Sleep(taskPoll)
			}
			close(done)
		}()
	}
	deadline := rec.StartedAt.Add(time.Duration(rec.TimeoutSeconds) * time.Second)
	timer := time.NewTimer(max(deadline.Sub(t.now()), 0))
	defer timer.Stop()
	var ended *stopRequest
	select {
	case <-done:
	case <-timer.C:
		ended = &stopRequest{state: guestprotocol.TaskTimedOut, message: fmt.Sprintf("it ran longer than its timeout of %ds; its process group was killed", rec.TimeoutSeconds)}
	case req := <-stop:
		ended = &req
	}
	if ended != nil {
		killGroup(rec.PID, done)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.abandoned {
		return
	}
	switch code, ok := t.exitStatus(rec); {
	case ended != nil:
		t.finish(rec, ended.state, nil, ended.message)
	case ok:
		t.finishExited(rec, code)
	default:
		t.finish(rec, guestprotocol.TaskFailed, nil, "it ended without an exit status (its shell was killed)")
	}
	if t.running == rec.ID {
		t.running = ""
	}
	if rec.Binding != t.binding {
		// Its claim is gone: so is its output.
		if err := os.RemoveAll(filepath.Join(t.Dir, rec.ID)); err == nil {
			delete(t.records, rec.ID)
		}
	}
	t.startNext()
}

// stopRunning asks the running task to end.
func (t *Tasks) stopRunning(state guestprotocol.TaskState, message string) {
	select {
	case t.stop <- stopRequest{state: state, message: message}:
	default:
	}
}

// killGroup sends SIGTERM to the process group, and SIGKILL after
// TaskGrace if it has not ended.
func killGroup(pgid int, done <-chan struct{}) {
	if pgid <= 0 {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(TaskGrace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// exitStatus is the status the task's shell recorded, read from the
// agent's own file: a regular file, no link, a few bytes.
func (t *Tasks) exitStatus(rec *taskRecord) (int, bool) {
	raw, err := readOwn(filepath.Join(t.Dir, rec.ID, exitFile), 16)
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	return code, err == nil
}

// readOwn reads at most limit bytes of a regular file of the agent's
// directory, following no link.
func readOwn(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0) //nolint:gosec // the agent's own directory.
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

func (t *Tasks) finishExited(rec *taskRecord, code int) {
	state, msg := guestprotocol.TaskSucceeded, ""
	if code != 0 {
		state, msg = guestprotocol.TaskFailed, fmt.Sprintf("the script exited with status %d", code)
	}
	t.finish(rec, state, &code, msg)
}

// finish records how a task ended, with its output's tail.
func (t *Tasks) finish(rec *taskRecord, state guestprotocol.TaskState, code *int, message string) {
	rec.State, rec.ExitCode, rec.FinishedAt = state, code, t.now()
	rec.Message = guestprotocol.Truncate(message, guestprotocol.MaxTaskMessageBytes)
	rec.OutputTail = t.tail(rec)
	if err := t.save(rec); err != nil {
		t.logf("recording the end of task %s: %v", rec.ID, err)
	}
	t.logf("task %s ended: %s %s", rec.ID, state, message)
	t.signal()
}

// tail is the end of the task's output, masked, at most
// MaxOutputTailBytes, starting at a line when it can.
func (t *Tasks) tail(rec *taskRecord) string {
	f, err := os.OpenFile(filepath.Join(t.Dir, rec.ID, outputFile), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return ""
	}
	offset := max(info.Size()-outputWindow, 0)
	buf := make([]byte, info.Size()-offset)
	if _, err := f.ReadAt(buf, offset); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if offset > 0 {
		// A line cut by the window may hold part of a masked value.
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return Tail(Mask(string(buf), rec.Mask), guestprotocol.MaxOutputTailBytes)
}

// Mask replaces every occurrence of each value, and of each line of a
// value of several lines, by guestprotocol.MaskText.
func Mask(s string, values []string) string {
	var all []string
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			continue
		}
		all = append(all, v)
		if strings.Contains(v, "\n") {
			for _, line := range strings.Split(v, "\n") {
				if len(strings.TrimSpace(line)) >= 4 {
					all = append(all, line)
				}
			}
		}
	}
	// Longer values first, so one containing another is masked whole.
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) })
	for _, v := range all {
		s = strings.ReplaceAll(s, v, guestprotocol.MaskText)
	}
	return s
}

// Tail is the end of s, at most n bytes, from the start of a line when
// one starts in it, and on a rune boundary.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := s[len(s)-n:]
	if i := strings.IndexByte(cut, '\n'); i >= 0 && i < len(cut)-1 {
		return cut[i+1:]
	}
	for len(cut) > 0 && !isRuneStart(cut[0]) {
		cut = cut[1:]
	}
	return cut
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// bindingFile, in Dir, holds the binding the last answer named, so an
// agent that restarts reports that binding's tasks from its first
// heartbeat on.
const bindingFile = ".binding"

func (t *Tasks) saveBinding() error {
	if err := os.MkdirAll(t.Dir, 0o711); err != nil { //nolint:gosec // the task's user enters it to run its script.
		return err
	}
	return writeSynced(t.Dir, bindingFile, []byte(t.binding))
}

// save writes the record atomically and syncs it.
func (t *Tasks) save(rec *taskRecord) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(t.Dir, rec.ID), taskFile, raw)
}

// writeSynced replaces dir/name with raw: a temporary file, synced, renamed
// over it, and the directory synced.
func writeSynced(dir, name string, raw []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) //nolint:gosec // the agent's own directory.
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
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
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil { //nolint:gosec // the agent's own directory.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// setCredential runs cmd as user when that is not the agent's own user.
func setCredential(cmd *exec.Cmd, user TaskUser) {
	if user.UID == os.Geteuid() && user.GID == os.Getegid() {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	groups := make([]uint32, 0, len(user.Groups))
	for _, g := range user.Groups {
		groups = append(groups, uint32(g)) //nolint:gosec // gids fit.
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(user.UID), Gid: uint32(user.GID), Groups: groups} //nolint:gosec // uids fit.
}
