package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/macvirt/macvirt/internal/operator"
)

// The operator's side of a macvirt run is a process of its own (this
// binary again, with -operator-kubeconfig), as kube-controller-manager is
// the PV binder's: the CPU of each is that process's, read the same way
// (procCPU), and the bench process only creates and watches.
//
// The two talk over the child's stdin and stdout, a line each way:
//
//	child:  ready               caches synced, controllers running
//	parent: begin <label>       the window starts: counts reset (and, with
//	                            -profile-dir, the CPU profile <label>-operator.pprof starts)
//	child:  ok
//	parent: end                 the window ends
//	child:  {"writes":...}      the operator's writes over the window (opReport)
//
// and the parent closing stdin stops the operator and the process.

// operatorProcess is the parent's handle on the operator's process.
type operatorProcess struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	lines   chan string
	exited  chan error
	cleanup func()
}

// startOperatorProcess starts the operator's process against env's API
// server, with the claim and exposure controllers, and waits until it is
// ready.
func startOperatorProcess(env *envtest.Environment) (*operatorProcess, error) {
	kubeconfig, cleanup, err := adminKubeconfig(env, "macvirt-operator")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		cleanup()
		return nil, err
	}
	args := []string{"-operator-kubeconfig", kubeconfig, "-workers", strconv.Itoa(benchWorkers)}
	if profileDir != "" {
		args = append(args, "-profile-dir", profileDir)
	}
	cmd := exec.Command(self, args...) //nolint:gosec // this binary.
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, err
	}
	p := &operatorProcess{cmd: cmd, in: in, lines: make(chan string, 16), exited: make(chan error, 1), cleanup: cleanup}
	go func() {
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
		p.exited <- cmd.Wait()
	}()
	if line, err := p.next(2 * time.Minute); err != nil || line != "ready" {
		p.stop()
		return nil, fmt.Errorf("the operator's process did not start: %q %v", line, err)
	}
	return p, nil
}

// pid is the operator process's id.
func (p *operatorProcess) pid() int { return p.cmd.Process.Pid }

func (p *operatorProcess) next(timeout time.Duration) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("the operator's process exited")
		}
		return line, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("no answer from the operator's process within %s", timeout)
	}
}

func (p *operatorProcess) call(line string) (string, error) {
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		return "", err
	}
	return p.next(time.Minute)
}

// begin starts the window: the operator's counts from zero.
func (p *operatorProcess) begin(label string) error {
	if got, err := p.call("begin " + label); err != nil || got != "ok" {
		return fmt.Errorf("the operator's process did not begin: %q %v", got, err)
	}
	return nil
}

// end ends the window and returns the operator's writes in it.
func (p *operatorProcess) end() (*opReport, error) {
	got, err := p.call("end")
	if err != nil {
		return nil, err
	}
	var r opReport
	if err := json.Unmarshal([]byte(got), &r); err != nil {
		return nil, fmt.Errorf("the operator's process said %q: %w", got, err)
	}
	return &r, nil
}

// stop ends the operator's process, gently (stdin closed: its manager
// stops) and, after a minute, not.
func (p *operatorProcess) stop() {
	_ = p.in.Close()
	select {
	case err := <-p.exited:
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: the operator's process ended with:", err)
		}
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "bench: the operator's process did not stop within a minute; killing it")
		_ = p.cmd.Process.Kill()
		if err := <-p.exited; err != nil {
			fmt.Fprintln(os.Stderr, "bench: the operator's process, killed:", err)
		}
	}
	p.cleanup()
}

// operatorMain is the operator's process: the claim and exposure
// controllers, every write counted, against the API server of kubeconfig,
// answering the parent on stdin and stdout until stdin closes.
func operatorMain(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, -1 // no client-side limit, like the PV binder's lifted one.
	ctx := context.Background()
	writes := &writeCounter{}
	op, err := operator.New(ctx, cfg, operator.Options{
		Controllers:  []operator.Controller{operator.ClaimController, operator.ExposureController},
		ClaimWorkers: benchWorkers,
		WrapClient:   func(inner client.Client) client.Client { return &countingClient{Client: inner, writes: writes} },
	})
	if err != nil {
		return err
	}
	stop, err := startOperator(ctx, op)
	if err != nil {
		return err
	}
	defer stop()
	out := bufio.NewWriter(os.Stdout)
	say := func(line string) error {
		if _, err := out.WriteString(line + "\n"); err != nil {
			return err
		}
		return out.Flush()
	}
	if err := say("ready"); err != nil {
		return err
	}
	var profile *os.File
	stopProfile := func() {
		if profile != nil {
			pprof.StopCPUProfile()
			_ = profile.Close()
			profile = nil
		}
	}
	defer stopProfile()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "begin":
			stopProfile()
			if profileDir != "" && arg != "" {
				if profile, err = startOwnProfile(filepath.Join(profileDir, arg+"-operator.pprof")); err != nil {
					return err
				}
			}
			writes.reset()
			err = say("ok")
		case "end":
			stopProfile()
			var raw bytes.Buffer
			if err = json.NewEncoder(&raw).Encode(writes.report()); err == nil {
				err = say(strings.TrimSpace(raw.String()))
			}
		default:
			err = fmt.Errorf("the operator's process was told %q", in.Text())
		}
		if err != nil {
			return err
		}
	}
	return in.Err()
}

// startOwnProfile starts this process's CPU profile into path.
func startOwnProfile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	f, err := os.Create(path) //nolint:gosec // under the directory -profile-dir names.
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
