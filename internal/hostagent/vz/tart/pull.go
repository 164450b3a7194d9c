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
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

// cancelGrace is how long a cancelled pull has to end after SIGINT (tart
// cancels its task on it, and removes the part it pulled) before it is
// killed.
const cancelGrace = time.Minute

// pulling runs a tart command that may pull an image (clone, pull), which
// may run for hours: its output is read as it comes, each progress line
// told to progress. A cancelled ctx sends SIGINT, as Ctrl+C does, on which
// tart cancels the pull and removes its temporary directory; SIGKILL would
// leave it behind until tart's next garbage collection.
func (d *Driver) pulling(ctx context.Context, progress func(vz.PullProgress), args ...string) error {
	cmd := exec.CommandContext(ctx, d.binary(), args...) //nolint:gosec // G204: the binary is the operator's configured tart.
	// tart prints a new line for each percent with CI set (its
	// SimpleConsoleLogger), not the cursor moves of a terminal.
	cmd.Env = append(d.env(), "CI=true")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = cancelGrace
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running tart %s: %w", strings.Join(args, " "), err)
	}
	readProgress(out, progress)
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("tart %s: %w", strings.Join(args, " "), ctx.Err())
	case errors.As(err, &ee):
		return &exitError{code: ee.ExitCode(), stderr: lastLine(stderr.String())}
	case err != nil:
		return fmt.Errorf("running tart %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// readProgress reads tart's output to its end, telling progress of each
// line that moves the pull on.
func readProgress(r io.Reader, progress func(vz.PullProgress)) {
	var p vz.PullProgress
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if parsePullLine(sc.Text(), &p) && progress != nil {
			progress(p)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// parsePullLine reads one line of tart's pull output into p, and says
// whether it changed p. tart says "pulling disk (17.6 GB compressed)..."
// once (GB of 10^9 bytes, one decimal), then the percentage of it pulled,
// "42%", a line each (or, on a terminal, the same line redrawn after
// escape sequences, which are skipped).
func parsePullLine(line string, p *vz.PullProgress) bool {
	if i := strings.LastIndex(line, "\x1b[J"); i >= 0 {
		line = line[i+len("\x1b[J"):]
	}
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "pulling disk ("); ok {
		gb, _, ok := strings.Cut(rest, " GB compressed)")
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(gb, 64)
		if err != nil || f < 0 {
			return false
		}
		p.TotalBytes, p.CompletedBytes, p.Percent = int64(f*1e9), 0, 0
		return true
	}
	pct, ok := strings.CutSuffix(line, "%")
	if !ok || p.TotalBytes == 0 {
		return false
	}
	n, err := strconv.Atoi(pct)
	if err != nil || n < 0 || n > 100 {
		return false
	}
	done := p.TotalBytes / 100 * int64(n)
	if n == 100 {
		done = p.TotalBytes
	}
	if done == p.CompletedBytes {
		return false
	}
	p.CompletedBytes, p.Percent = done, n
	return true
}
