package fakebuildkite

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ExitJobUnavailable is buildkite-agent's exit status when the job to
// acquire was taken, cancelled or finished (a 422 from Buildkite).
const ExitJobUnavailable = 27

// AgentMain plays `buildkite-agent start --acquire-job <id>`: it registers
// with the token in BUILDKITE_AGENT_TOKEN (or --token) at
// BUILDKITE_AGENT_ENDPOINT (or --endpoint), acquires that one job, runs its
// command with sh -c, reports the result and exits: 0 once the job ran
// (whatever its result), ExitJobUnavailable when Buildkite would not give
// the job, 1 on any other failure.
func AgentMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "start" {
		_, _ = fmt.Fprintln(stderr, "buildkite-agent: only `start` is played here")
		return 1
	}
	fs := flag.NewFlagSet("buildkite-agent start", flag.ContinueOnError)
	fs.SetOutput(stderr)
	job := fs.String("acquire-job", getenv("BUILDKITE_AGENT_ACQUIRE_JOB"), "the job to acquire")
	tok := fs.String("token", getenv("BUILDKITE_AGENT_TOKEN"), "the registration token")
	endpoint := fs.String("endpoint", getenv("BUILDKITE_AGENT_ENDPOINT"), "the agent API")
	name := fs.String("name", getenv("BUILDKITE_AGENT_NAME"), "the agent's name")
	if err := fs.Parse(args[1:]); err != nil {
		return 1
	}
	if *job == "" || *tok == "" || *endpoint == "" {
		_, _ = fmt.Fprintln(stderr, "buildkite-agent: --acquire-job, a token and an endpoint are required")
		return 1
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	api := agentAPI{base: strings.TrimSuffix(*endpoint, "/"), client: &http.Client{Timeout: 30 * time.Second}}
	var reg struct {
		AccessToken string `json:"access_token"`
	}
	if _, err := api.call(ctx, http.MethodPost, "/register", *tok, map[string]string{"name": *name}, &reg); err != nil {
		_, _ = fmt.Fprintf(stderr, "buildkite-agent: registering: %v\n", err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "registered agent %s\n", *name)
	var acquired struct {
		Env map[string]string `json:"env"`
	}
	code, err := api.call(ctx, http.MethodPut, "/jobs/"+*job+"/acquire", reg.AccessToken, struct{}{}, &acquired)
	switch {
	case err != nil && code == http.StatusUnprocessableEntity:
		_, _ = fmt.Fprintf(stderr, "buildkite-agent: job %s cannot be acquired: %v\n", *job, err)
		return ExitJobUnavailable
	case err != nil:
		_, _ = fmt.Fprintf(stderr, "buildkite-agent: acquiring job %s: %v\n", *job, err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "acquired job %s\n", *job)
	// Running the job's command is what an agent is for.
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", acquired.Env["BUILDKITE_COMMAND"]) //nolint:gosec // the job's own command.
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, stdout), io.MultiWriter(&out, stderr)
	cmd.Env = os.Environ()
	for k, v := range acquired.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	status := 0
	if err := cmd.Run(); err != nil {
		status = -1
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		}
	}
	finish := map[string]string{"exit_status": fmt.Sprint(status), "output": out.String()}
	if _, err := api.call(ctx, http.MethodPut, "/jobs/"+*job+"/finish", reg.AccessToken, finish, nil); err != nil {
		_, _ = fmt.Fprintf(stderr, "buildkite-agent: finishing job %s: %v\n", *job, err)
		return 1
	}
	_, _ = fmt.Fprintf(stdout, "job %s finished with exit status %d; disconnecting\n", *job, status)
	return 0
}

type agentAPI struct {
	base   string
	client *http.Client
}

// call sends body as JSON with the token and decodes the answer into out;
// an answer other than 200 is an error with Buildkite's message.
func (a agentAPI) call(ctx context.Context, method, path, tok string, body, out any) (int, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Token "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return resp.StatusCode, fmt.Errorf("%d: %s", resp.StatusCode, e.Message)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}
