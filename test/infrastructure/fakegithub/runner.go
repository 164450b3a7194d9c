package fakegithub

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// runnerEvent is one line of a fake runner's connection.
type runnerEvent struct {
	// Event is "online", "job", "completed" or "removed".
	Event          string `json:"event"`
	RunnerID       int    `json:"runnerId"`
	RunnerName     string `json:"runnerName"`
	JobID          string `json:"jobId,omitempty"`
	JobDisplayName string `json:"jobDisplayName,omitempty"`
	Result         string `json:"result,omitempty"`
}

// handleRunnerListen is a fake runner's connection. While it holds the
// runner is online; it streams one JSON event a line: "online" at once,
// "job" when the runner is given a job, then "completed" with the job's
// result, or "removed" when the idle runner is removed, and ends.
func (s *Server) handleRunnerListen(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.Atoi(r.PathValue("id"))
	s.mu.Lock()
	var rn *runner
	if id >= 1 && id <= len(s.allRunners) {
		rn = s.allRunners[id-1]
	}
	switch {
	case rn == nil || authToken(r, "bearer") != rn.secret:
		s.mu.Unlock()
		writeJSON(w, http.StatusUnauthorized, badCredentials)
		return
	case rn.removed:
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, githubError{Message: fmt.Sprintf("runner %s was removed", rn.name)})
		return
	case rn.finished:
		s.mu.Unlock()
		writeJSON(w, http.StatusGone, githubError{Message: fmt.Sprintf("runner %s already ran its job and was removed", rn.name)})
		return
	case rn.online:
		s.mu.Unlock()
		writeJSON(w, http.StatusConflict, githubError{Message: fmt.Sprintf("runner %s is already connected", rn.name)})
		return
	}
	rn.online = true
	rn.conn++
	gen := rn.conn
	rn.lostGen++ // a pending loss no longer counts
	s.nextConnect++
	rn.onlineSeq = s.nextConnect
	if j := rn.job; j != nil && j.state == JobRunning && j.workDone {
		s.finishLocked(j, j.endResult)
	}
	s.settleLocked()
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(ev runnerEvent) bool {
		ev.RunnerID, ev.RunnerName = rn.id, rn.name
		b, _ := json.Marshal(ev)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(runnerEvent{Event: "online"}) {
		s.runnerLost(rn, gen)
		return
	}
	sentJob := false
	for {
		s.mu.Lock()
		var events []runnerEvent
		end := false
		if j := rn.job; j != nil && !sentJob {
			events = append(events, runnerEvent{Event: "job", JobID: j.id, JobDisplayName: j.displayName})
			sentJob = true
		}
		switch {
		case rn.finished:
			events = append(events, runnerEvent{Event: "completed", JobID: rn.job.id, JobDisplayName: rn.job.displayName, Result: rn.result})
			end = true
		case rn.removed:
			events = append(events, runnerEvent{Event: "removed"})
			end = true
		}
		if end {
			rn.online = false
		}
		closed, changed := s.closed, s.changed
		s.mu.Unlock()
		for _, ev := range events {
			if !send(ev) {
				s.runnerLost(rn, gen)
				return
			}
		}
		if end || closed {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			s.runnerLost(rn, gen)
			return
		case <-s.done:
			return
		}
	}
}

// runnerLost marks a runner whose connection dropped offline. A runner
// that was running a job has LostRunnerGrace to come back; then its job
// fails and it leaves.
func (s *Server) runnerLost(rn *runner, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rn.conn != gen || !rn.online {
		return
	}
	rn.online = false
	if j := rn.job; j != nil && j.state == JobRunning && !s.closed {
		rn.lostGen++
		lost := rn.lostGen
		s.afterFuncLocked(s.opts.LostRunnerGrace, func() {
			if rn.lostGen == lost && !rn.online && j.state == JobRunning && j.runner == rn {
				s.finishLocked(j, ResultFailed)
				s.settleLocked()
			}
		})
	}
	s.settleLocked()
}

// runnerHTTP is the fake runner's HTTP client; its connection holds for
// as long as the runner is online, so it has no timeout.
var runnerHTTP = &http.Client{}

// RunRunner plays GitHub's actions runner started with
// "run.sh --jitconfig <encodedJITConfig>" against the fake GitHub that
// issued the configuration. It connects, which makes the runner online and
// idle; it runs at most one job, printing the runner's lines to out, and
// returns nil when the job has completed (whatever its result). It returns
// an error when the runner was removed while it waited for a job, when the
// runner cannot connect, or when the connection is lost, and ctx.Err()
// when ctx ends first: the runner then goes offline, and a job it was
// running fails after the server's LostRunnerGrace.
func RunRunner(ctx context.Context, encodedJITConfig string, out io.Writer) error {
	if out == nil {
		out = io.Discard
	}
	cfg, err := decodeJITConfig(encodedJITConfig)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		cfg.ServerURL+"/_fake/runners/"+strconv.Itoa(cfg.RunnerID)+"/listen", nil)
	if err != nil {
		return fmt.Errorf("runner %s: %w", cfg.RunnerName, err)
	}
	req.Header.Set("Authorization", "Bearer "+cfg.Secret)
	resp, err := runnerHTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("runner %s: connecting to GitHub: %w", cfg.RunnerName, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		var e githubError
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if json.Unmarshal(b, &e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("runner %s: GitHub refused the connection (%s): %s", cfg.RunnerName, resp.Status, e.Message)
	}
	stamp := func() string { return time.Now().UTC().Format("2006-01-02 15:04:05Z") }
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev runnerEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("runner %s: unreadable event %q: %w", cfg.RunnerName, sc.Text(), err)
		}
		switch ev.Event {
		case "online":
			_, _ = fmt.Fprintf(out, "√ Connected to GitHub\n\nCurrent runner version: '%s'\n%s: Listening for Jobs\n", runnerVersion, stamp())
		case "job":
			_, _ = fmt.Fprintf(out, "%s: Running job: %s\n", stamp(), ev.JobDisplayName)
		case "completed":
			_, _ = fmt.Fprintf(out, "%s: Job %s completed with result: %s\n", stamp(), ev.JobDisplayName, titleCase(ev.Result))
			return nil
		case "removed":
			return fmt.Errorf("runner %s was removed from GitHub while it waited for a job", cfg.RunnerName)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("runner %s: lost the connection to GitHub: %w", cfg.RunnerName, err)
	}
	return fmt.Errorf("runner %s: lost the connection to GitHub", cfg.RunnerName)
}

// titleCase capitalises a result as the runner prints it: "Succeeded".
func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// decodeJITConfig reads the fake's part of a just-in-time configuration.
func decodeJITConfig(encoded string) (jitFake, error) {
	var cfg jitFake
	outer, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return cfg, fmt.Errorf("the JIT configuration is not base64: %w", err)
	}
	var files map[string]string
	if err := json.Unmarshal(outer, &files); err != nil {
		return cfg, fmt.Errorf("the JIT configuration is not a JSON object of runner files: %w", err)
	}
	inner, ok := files[jitFakeFile]
	if !ok {
		return cfg, errors.New("the JIT configuration was not issued by fakegithub")
	}
	b, err := base64.StdEncoding.DecodeString(inner)
	if err != nil {
		return cfg, fmt.Errorf("the JIT configuration's %s file is not base64: %w", jitFakeFile, err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("the JIT configuration's %s file: %w", jitFakeFile, err)
	}
	if cfg.ServerURL == "" || cfg.RunnerID == 0 || cfg.Secret == "" {
		return cfg, errors.New("the JIT configuration lacks the server, the runner id or the secret")
	}
	return cfg, nil
}

// RunnerMain is the fake runner's command line, as GitHub's run.sh takes
// it: --jitconfig CONFIG. It runs one job and returns the exit code (0
// after the job, whatever its result; 1 when the runner could not run one;
// 2 for a bad command line).
func RunnerMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run.sh", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jit := fs.String("jitconfig", "", "the runner's just-in-time configuration")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *jit == "" {
		_, _ = fmt.Fprintln(stderr, "run.sh: --jitconfig is required")
		return 2
	}
	if err := RunRunner(ctx, *jit, stdout); err != nil {
		_, _ = fmt.Fprintln(stderr, "run.sh:", err)
		return 1
	}
	return 0
}
