package guestagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// testHost runs tasks as the test's user, with homes and files under a
// directory of the test's.
type testHost struct{ dir string }

func (h testHost) TaskUser(name string) (TaskUser, error) {
	home := filepath.Join(h.dir, "Users", name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return TaskUser{}, err
	}
	return TaskUser{Name: name, UID: os.Getuid(), GID: os.Getgid(), Home: home}, nil
}
func (h testHost) TaskPath(path string) string { return filepath.Join(h.dir, path) }

var boot = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func newTasks(t *testing.T, dir string) *Tasks {
	t.Helper()
	return &Tasks{Dir: filepath.Join(dir, "tasks"), Host: testHost{dir: dir}, Boot: boot, Logf: t.Logf}
}

// waitFor polls the runner's reports until one of id is in a final state.
func waitFor(t *testing.T, tasks *Tasks, id string) guestprotocol.TaskReport {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range tasks.Reports() {
			if r.ID == id && r.State != guestprotocol.TaskRunning {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("task %s did not finish within 30s: %+v", id, tasks.Reports())
	return guestprotocol.TaskReport{}
}

func TestATaskPlacesItsFilesAndRunsWithItsEnvironmentMasked(t *testing.T) {
	dir := t.TempDir()
	tasks := newTasks(t, dir)
	tasks.Update("claim-1", []guestprotocol.Task{{ID: "claim-1-claim", User: "admin", TimeoutSeconds: 30,
		Script: `echo "hello from $USER in $HOME"; echo "token=$TOKEN"; cat "$CONFIG"; exit 0`,
		Env:    []guestprotocol.EnvVar{{Name: "TOKEN", Value: "s3cr3t-value"}, {Name: "CONFIG", Value: filepath.Join(dir, "etc/app.conf")}},
		Files:  []guestprotocol.File{{Path: "/etc/app.conf", Mode: 0o600, Owner: "admin", Content: []byte("key=another-s3cret\n")}},
		Mask:   []string{"s3cr3t-value", "key=another-s3cret\n"}}})
	r := waitFor(t, tasks, "claim-1-claim")
	if r.State != guestprotocol.TaskSucceeded || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("report %+v, want Succeeded with exit 0", r)
	}
	if strings.Contains(r.OutputTail, "s3cr3t") {
		t.Errorf("the output tail shows a masked value: %q", r.OutputTail)
	}
	for _, want := range []string{"hello from admin in " + filepath.Join(dir, "Users", "admin"), "token=" + guestprotocol.MaskText} {
		if !strings.Contains(r.OutputTail, want) {
			t.Errorf("output tail %q lacks %q", r.OutputTail, want)
		}
	}
	info, err := os.Stat(filepath.Join(dir, "etc", "app.conf"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("placed file: %v %v, want mode 0600", info, err)
	}
	// The whole log stays on the guest, unmasked, for the user to read.
	full, err := os.ReadFile(filepath.Join(dir, "tasks", "claim-1-claim", "output.log")) //nolint:gosec // the test's own file.
	if err != nil || !strings.Contains(string(full), "token=s3cr3t-value") {
		t.Errorf("the full log %q (%v) is not the script's output", full, err)
	}
}

func TestAFailingScriptReportsItsExitStatus(t *testing.T) {
	tasks := newTasks(t, t.TempDir())
	tasks.Update("b", []guestprotocol.Task{{ID: "b-claim", User: "admin", TimeoutSeconds: 30, Script: "echo broken >&2; exit 3"}})
	r := waitFor(t, tasks, "b-claim")
	if r.State != guestprotocol.TaskFailed || r.ExitCode == nil || *r.ExitCode != 3 || !strings.Contains(r.OutputTail, "broken") {
		t.Fatalf("report %+v, want Failed with exit 3 and the error output", r)
	}
}

func TestATaskThatOutlivesItsTimeoutIsKilledWithItsChildren(t *testing.T) {
	dir := t.TempDir()
	setGrace(t, 200*time.Millisecond)
	tasks := newTasks(t, dir)
	pidFile := filepath.Join(dir, "child.pid")
	tasks.Update("b", []guestprotocol.Task{{ID: "b-claim", User: "admin", TimeoutSeconds: 1,
		Script: "sleep 300 & echo $! > " + pidFile + "; wait"}})
	r := waitFor(t, tasks, "b-claim")
	if r.State != guestprotocol.TaskTimedOut || r.ExitCode != nil {
		t.Fatalf("report %+v, want TimedOut without an exit code", r)
	}
	raw, err := os.ReadFile(pidFile) //nolint:gosec // the test's own file.
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		// A zombie is dead too: only its parent (the killed shell) was gone.
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if !strings.Contains(string(status), "zombie") {
			t.Errorf("the script's child %d outlived the timeout", pid)
		}
	}
}

func TestARestartedAgentNeverRunsATaskAgain(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	task := guestprotocol.Task{ID: "b-claim", User: "admin", TimeoutSeconds: 30,
		Script: "echo run >> " + count + "; sleep 1; echo done"}
	first := newTasks(t, dir)
	first.Update("b", []guestprotocol.Task{task})
	time.Sleep(200 * time.Millisecond)
	// The agent goes away mid-task; the script runs on.
	first.Forget()
	second := newTasks(t, dir)
	// The operator, told nothing yet by the new agent, hands it again.
	second.Update("b", []guestprotocol.Task{task})
	if got := second.Reports(); len(got) != 1 || got[0].State != guestprotocol.TaskRunning {
		t.Fatalf("the new agent reports %+v, want the task Running", got)
	}
	r := waitFor(t, second, "b-claim")
	if r.State != guestprotocol.TaskSucceeded || !strings.Contains(r.OutputTail, "done") {
		t.Fatalf("report %+v, want the first run's success", r)
	}
	third := newTasks(t, dir)
	third.Update("b", []guestprotocol.Task{task})
	time.Sleep(300 * time.Millisecond)
	raw, err := os.ReadFile(count) //nolint:gosec // the test's own file.
	if err != nil || strings.Count(string(raw), "run") != 1 {
		t.Fatalf("the script ran %d times (%v), want once", strings.Count(string(raw), "run"), err)
	}
	if r := third.Reports(); len(r) != 1 || r[0].State != guestprotocol.TaskSucceeded {
		t.Errorf("a third agent reports %+v, want the task Succeeded from its record", r)
	}
}

func TestATaskCutOffByARebootIsFailedNotRunAgain(t *testing.T) {
	dir := t.TempDir()
	task := guestprotocol.Task{ID: "b-claim", User: "admin", TimeoutSeconds: 30, Script: "sleep 30"}
	first := newTasks(t, dir)
	first.Update("b", []guestprotocol.Task{task})
	time.Sleep(100 * time.Millisecond)
	first.Stop()
	next := newTasks(t, dir)
	next.Boot = boot.Add(time.Hour)
	next.Update("b", []guestprotocol.Task{task})
	r := next.Reports()
	if len(r) != 1 || r[0].State != guestprotocol.TaskFailed || !strings.Contains(r[0].Message, "restarted") {
		t.Fatalf("after a reboot: %+v, want Failed saying the Mac restarted", r)
	}
}

func TestANewBindingStopsTheOldOnesTaskAndForgetsItsOutput(t *testing.T) {
	dir := t.TempDir()
	setGrace(t, 200*time.Millisecond)
	tasks := newTasks(t, dir)
	tasks.Update("old", []guestprotocol.Task{{ID: "old-claim", User: "admin", TimeoutSeconds: 30, Script: "echo old-secret; sleep 30"}})
	time.Sleep(200 * time.Millisecond)
	tasks.Update("new", []guestprotocol.Task{{ID: "new-claim", User: "admin", TimeoutSeconds: 30, Script: "echo fresh"}})
	r := waitFor(t, tasks, "new-claim")
	if r.State != guestprotocol.TaskSucceeded {
		t.Fatalf("the new binding's task: %+v", r)
	}
	if got := tasks.Reports(); len(got) != 1 || got[0].ID != "new-claim" {
		t.Errorf("reports %+v, want the new binding's task only", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "tasks", "old-claim")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old binding's task directory is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMaskAndTail(t *testing.T) {
	if got := Mask("a=hunter2 b=hunter22", []string{"hunter2", "hunter22", " "}); got != "a="+guestprotocol.MaskText+" b="+guestprotocol.MaskText {
		t.Errorf("Mask: %q", got)
	}
	if got := Mask("line one\nkey: abcd\n", []string{"key: abcd\nother: efgh"}); strings.Contains(got, "abcd") {
		t.Errorf("a line of a value of several lines is not masked: %q", got)
	}
	if got := Tail("first\nsecond\nthird", 12); got != "third" {
		t.Errorf("Tail from a line start: %q", got)
	}
	if got := Tail("ééé", 3); got != "é" {
		t.Errorf("Tail on a rune boundary: %q", got)
	}
}

func setGrace(t *testing.T, d time.Duration) {
	old := TaskGrace
	TaskGrace = d
	t.Cleanup(func() { TaskGrace = old })
}

func TestOnlyRootIsUIDZeroAndPeopleAreNotSystemAccounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		uid  int
		ok   bool
	}{
		{"root", 0, true}, {"admin", 501, true}, {"shared", 0, false}, {"daemon", 1, false}, {"root", 501, false}, {"_www", 70, false},
	} {
		if err := CheckAccount(tc.name, tc.uid, 500); (err == nil) != tc.ok {
			t.Errorf("CheckAccount(%s, %d) = %v, want ok=%v", tc.name, tc.uid, err, tc.ok)
		}
	}
}

func TestAnAnswerWithoutABindingForgetsNothing(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	task := guestprotocol.Task{ID: "a-claim", User: "admin", TimeoutSeconds: 30, Script: "echo run >> " + count}
	tasks := newTasks(t, dir)
	tasks.Update("a", []guestprotocol.Task{task})
	waitFor(t, tasks, "a-claim")
	tasks.Update("", nil)
	tasks.Update("a", []guestprotocol.Task{task})
	time.Sleep(200 * time.Millisecond)
	raw, err := os.ReadFile(count) //nolint:gosec // the test's own file.
	if err != nil || strings.Count(string(raw), "run") != 1 {
		t.Fatalf("the script ran %d times (%v), want once", strings.Count(string(raw), "run"), err)
	}
}
