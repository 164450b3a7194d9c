package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Build compiles the command in the current directory (a test's package)
// into the test's temporary directory, with flags passed to go build, and
// returns its path.
func Build(t testing.TB, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(mustGetwd(t)))
	args := append(append([]string{"build"}, flags...), "-o", bin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil { //nolint:gosec // the test's own path and flags.
		t.Fatalf("building %s: %v\n%s", bin, err, out)
	}
	return bin
}

func mustGetwd(t testing.TB) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// Process is a program a test runs, with its output kept for failures.
type Process struct {
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan error
}

// StartProcess starts bin with args in dir ("" for the test's directory),
// with the test's environment plus env; it is killed when the test ends.
func StartProcess(t testing.TB, dir string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(bin, args...), exited: make(chan error, 1)} //nolint:gosec // a binary the test built.
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	return p
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// Exited reports the process's exit.
func (p *Process) Exited() <-chan error { return p.exited }

// Stop sends sig and fails the test unless the process exits cleanly
// within a minute.
func (p *Process) Stop(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("%s did not exit cleanly after %s: %v\n%s", p.cmd.Path, sig, err, p.Output())
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s did not stop within a minute of %s:\n%s", p.cmd.Path, sig, p.Output())
	}
}

// lockedBuffer is a bytes.Buffer safe for a process and a test at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
