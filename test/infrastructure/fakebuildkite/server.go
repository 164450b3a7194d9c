// Package fakebuildkite is a fake Buildkite for tests and the sandbox: the
// Stacks API a custom stack calls with a cluster agent token (register,
// scheduled jobs, batch reservation, job acquisition tokens, job states,
// finish, deregister), and the part of the agent API that `buildkite-agent
// start --acquire-job` uses (register with a job acquisition token, acquire
// that one job, finish it). AgentMain plays that agent in simulated guests.
//
// It keeps Buildkite's rules that a stack can get wrong: a job is reserved
// by one stack at a time and is scheduled again when its reservation
// expires unacquired; a job acquisition token is issued only for a job the
// stack holds reserved, lives 1 s to an hour (15 minutes by default) and no
// longer than the reservation, and lets its agent acquire that job only;
// acquiring a job that is taken, cancelled or finished is refused with 422.
package fakebuildkite

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Job states as the fake reports them (Buildkite's names).
const (
	StateScheduled = "scheduled"
	StateRunning   = "running"
	StateFinished  = "finished"
	StateCanceled  = "canceled"
)

// Job is one job of the queue.
type Job struct {
	ID string
	// Command is what the job runs (sh -c on the agent's machine);
	// Pipeline and Build name the build it belongs to.
	Command  string
	Pipeline string
	Build    int
	Priority int
	State    string
	// ReservedBy is the stack holding the job reserved until ReservedUntil.
	ReservedBy    string
	ReservedUntil time.Time
	// Agent is the name of the agent that acquired it; ExitStatus its
	// result once finished (-1: failed by the stack), Detail the stack's
	// reason then, Output what the command printed.
	Agent      string
	ExitStatus int
	Detail     string
	Output     string
	// Acquisitions counts successful acquisitions (never more than one).
	Acquisitions int
	scheduledAt  time.Time
}

type jat struct {
	job, stack string
	expires    time.Time
}

type agent struct {
	name, job string
}

// Server is a fake Buildkite.
type Server struct {
	// AgentToken is the cluster agent token the Stacks API accepts.
	AgentToken string
	// Queue is the cluster queue's key.
	Queue string

	mu     sync.Mutex
	now    func() time.Time
	jobs   map[string]*Job
	stacks map[string]bool
	jats   map[string]jat
	agents map[string]agent
	calls  map[string]int
	builds int
	paused bool
	srv    *httptest.Server
}

// New starts a fake Buildkite with one cluster queue.
func New(agentToken, queue string) *Server {
	s := &Server{AgentToken: agentToken, Queue: queue, now: time.Now, jobs: map[string]*Job{}, stacks: map[string]bool{},
		jats: map[string]jat{}, agents: map[string]agent{}, calls: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the agent API's base, as BUILDKITE_AGENT_ENDPOINT takes it.
func (s *Server) URL() string { return s.srv.URL + "/v3/" }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// SetClock makes the server read time from now (for expiry tests).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// AddJob schedules a job on the queue and returns its id.
func (s *Server) AddJob(command string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.schedule(command, 0)
}

// schedule adds a job of a new build of the pipeline app.
func (s *Server) schedule(command string, priority int) string {
	id := uuid()
	s.builds++
	s.jobs[id] = &Job{ID: id, Command: command, Pipeline: "app", Build: s.builds, Priority: priority, State: StateScheduled, scheduledAt: s.now()}
	return id
}

// Cancel cancels a job that has not run.
func (s *Server) Cancel(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[id]; j != nil && j.State == StateScheduled {
		j.State, j.ReservedBy = StateCanceled, ""
	}
}

// Job is a copy of the job id.
func (s *Server) Job(id string) (Job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	j, ok := s.jobs[id]
	if !ok {
		return Job{}, false
	}
	return *j, true
}

// Jobs are copies of every job, in the order they were scheduled.
func (s *Server) Jobs() []Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	out := make([]Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, *j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].scheduledAt.Before(out[b].scheduledAt) })
	return out
}

// SetPaused pauses or resumes the cluster queue.
func (s *Server) SetPaused(paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = paused
}

// validKey is a stack key Buildkite takes.
func validKey(key string) bool {
	if key == "" || len(key) > 80 {
		return false
	}
	for _, r := range key {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (r < '0' || r > '9') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// Stacks are the keys of the registered stacks, sorted.
func (s *Server) Stacks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.stacks))
	for k := range s.stacks {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Calls is how many requests each endpoint answered, by "METHOD name".
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// expire schedules again every job whose reservation ran out unacquired.
func (s *Server) expire() {
	now := s.now()
	for _, j := range s.jobs {
		if j.State == StateScheduled && j.ReservedBy != "" && !now.Before(j.ReservedUntil) {
			j.ReservedBy = ""
		}
	}
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func token(prefix string) string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, code int, msg string) {
	reply(w, code, map[string]string{"message": msg})
}

// serve routes a request under /v3/.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.Trim(strings.TrimPrefix(r.URL.Path, "/v3"), "/")
	parts := strings.Split(path, "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Token ")
	switch {
	case r.Method == http.MethodPost && path == "stacks/register":
		s.count(r, "stacks/register")
		if s.stackAuth(w, auth) {
			s.register(w, r)
		}
	case len(parts) >= 3 && parts[0] == "stacks":
		if !s.stackAuth(w, auth) {
			return
		}
		key, rest := parts[1], strings.Join(parts[2:], "/")
		if !s.stacks[key] {
			refuse(w, http.StatusNotFound, fmt.Sprintf("No stack found with key %q", key))
			return
		}
		s.stack(w, r, key, rest)
	case r.Method == http.MethodPost && path == "_fake/jobs":
		// Not Buildkite's: schedules a job, as a pipeline's build would.
		var body struct {
			Command  string `json:"command"`
			Priority int    `json:"priority"`
		}
		if !decode(w, r, &body) {
			return
		}
		reply(w, http.StatusCreated, map[string]string{"id": s.schedule(body.Command, body.Priority)})
	case r.Method == http.MethodPost && path == "register":
		s.count(r, "register")
		s.registerAgent(w, r, auth)
	case len(parts) == 3 && parts[0] == "jobs" && r.Method == http.MethodPut:
		s.count(r, "jobs/"+parts[2])
		s.agentJob(w, r, auth, parts[1], parts[2])
	default:
		refuse(w, http.StatusNotFound, "Not Found")
	}
}

func (s *Server) count(r *http.Request, name string) {
	s.calls[r.Method+" "+name]++
}

func (s *Server) stackAuth(w http.ResponseWriter, auth string) bool {
	if auth == "" || auth != s.AgentToken {
		refuse(w, http.StatusUnauthorized, "Invalid agent token")
		return false
	}
	return true
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		refuse(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Key      string            `json:"key"`
		Type     string            `json:"type"`
		QueueKey string            `json:"queue_key"`
		Metadata map[string]string `json:"metadata"`
	}
	if !decode(w, r, &body) {
		return
	}
	switch {
	case body.Key == "" || body.QueueKey == "":
		refuse(w, http.StatusUnprocessableEntity, "key and queue_key are required")
		return
	case !validKey(body.Key):
		refuse(w, http.StatusUnprocessableEntity, fmt.Sprintf("key %q must be 1 to 80 characters of A-Z, a-z, 0-9, _ and -", body.Key))
		return
	case body.Type != "custom":
		refuse(w, http.StatusUnprocessableEntity, fmt.Sprintf("type %q is reserved or unknown; custom stacks register as custom", body.Type))
		return
	case body.QueueKey != s.Queue:
		refuse(w, http.StatusNotFound, fmt.Sprintf("No cluster queue found with key %q", body.QueueKey))
		return
	}
	s.stacks[body.Key] = true
	now := s.now()
	reply(w, http.StatusOK, map[string]any{"id": "stack-" + body.Key, "key": body.Key, "type": body.Type, "cluster_queue_key": body.QueueKey,
		"metadata": body.Metadata, "state": "connected", "last_connected_on": now, "organization_uuid": "org"})
}

func (s *Server) stack(w http.ResponseWriter, r *http.Request, key, rest string) {
	switch {
	case r.Method == http.MethodGet && rest == "scheduled-jobs":
		s.count(r, "scheduled-jobs")
		s.scheduled(w, r)
	case r.Method == http.MethodPut && rest == "scheduled-jobs/batch-reserve":
		s.count(r, "batch-reserve")
		s.reserve(w, r, key)
	case r.Method == http.MethodPost && rest == "job-acquisition-tokens":
		s.count(r, "job-acquisition-tokens")
		s.issue(w, r, key)
	case r.Method == http.MethodPost && rest == "jobs/get-states":
		s.count(r, "get-states")
		s.states(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(rest, "jobs/") && strings.HasSuffix(rest, "/finish"):
		s.count(r, "finish")
		s.finish(w, r, key, strings.TrimSuffix(strings.TrimPrefix(rest, "jobs/"), "/finish"))
	case r.Method == http.MethodPost && rest == "deregister":
		s.count(r, "deregister")
		delete(s.stacks, key)
		reply(w, http.StatusOK, struct{}{})
	default:
		refuse(w, http.StatusNotFound, "Not Found")
	}
}

// scheduled lists the queue's jobs no stack holds reserved (not even the
// caller: a reserved job is listed again only once its reservation
// expired), highest priority first, then oldest, a page at a time.
func (s *Server) scheduled(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("queue_key") != s.Queue {
		refuse(w, http.StatusNotFound, fmt.Sprintf("No cluster queue found with key %q", q.Get("queue_key")))
		return
	}
	var open []*Job
	for _, j := range s.jobs {
		if j.State == StateScheduled && j.ReservedBy == "" {
			open = append(open, j)
		}
	}
	sort.Slice(open, func(a, b int) bool {
		if open[a].Priority != open[b].Priority {
			return open[a].Priority > open[b].Priority
		}
		return open[a].scheduledAt.Before(open[b].scheduledAt)
	})
	start, _ := strconv.Atoi(q.Get("after"))
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit > 1000 {
		limit = 100
	}
	start = min(max(start, 0), len(open))
	end := min(start+limit, len(open))
	type job struct {
		ID          string            `json:"id"`
		Priority    int               `json:"priority"`
		ScheduledAt time.Time         `json:"scheduled_at"`
		Rules       []string          `json:"agent_query_rules"`
		Pipeline    map[string]string `json:"pipeline"`
		Build       map[string]any    `json:"build"`
		Step        map[string]string `json:"step"`
	}
	page := []job{}
	for _, j := range open[start:end] {
		page = append(page, job{ID: j.ID, Priority: j.Priority, ScheduledAt: j.scheduledAt, Rules: []string{"queue=" + s.Queue},
			Pipeline: map[string]string{"slug": j.Pipeline, "uuid": "pipeline-" + j.Pipeline},
			Build:    map[string]any{"uuid": fmt.Sprintf("build-%d", j.Build), "number": j.Build, "branch": "main"},
			Step:     map[string]string{"key": "test"}})
	}
	info := map[string]any{"has_next_page": end < len(open), "end_cursor": ""}
	if end < len(open) {
		info["end_cursor"] = strconv.Itoa(end)
	}
	reply(w, http.StatusOK, map[string]any{"jobs": page, "cluster_queue": map[string]any{"id": "queue-" + s.Queue, "paused": s.paused},
		"page_info": info})
}

func (s *Server) reserve(w http.ResponseWriter, r *http.Request, key string) {
	var body struct {
		JobUUIDs []string `json:"job_uuids"`
		Expiry   int      `json:"reservation_expiry_seconds"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Expiry == 0 {
		body.Expiry = 900
	}
	if body.Expiry < 1 || body.Expiry > 3600 {
		refuse(w, http.StatusUnprocessableEntity, "reservation_expiry_seconds must be between 1 and 3600")
		return
	}
	reserved, not := []string{}, []string{}
	for _, id := range body.JobUUIDs {
		j := s.jobs[id]
		if j == nil || j.State != StateScheduled || (j.ReservedBy != "" && j.ReservedBy != key) {
			not = append(not, id)
			continue
		}
		j.ReservedBy, j.ReservedUntil = key, s.now().Add(time.Duration(body.Expiry)*time.Second)
		reserved = append(reserved, id)
	}
	reply(w, http.StatusOK, map[string]any{"reserved": reserved, "not_reserved": not})
}

// issue hands out a job acquisition token per job the stack holds
// reserved, living no longer than the reservation.
func (s *Server) issue(w http.ResponseWriter, r *http.Request, key string) {
	var body struct {
		JobUUIDs []string `json:"job_uuids"`
		Lifetime int      `json:"token_lifetime_seconds"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Lifetime == 0 {
		body.Lifetime = 900
	}
	if body.Lifetime < 1 || body.Lifetime > 3600 {
		refuse(w, http.StatusUnprocessableEntity, "token_lifetime_seconds must be between 1 and 3600")
		return
	}
	type issued struct {
		Job     string    `json:"job_uuid"`
		Token   string    `json:"job_acquisition_token"`
		Expires time.Time `json:"expires_at"`
	}
	tokens, not := []issued{}, []string{}
	for _, id := range body.JobUUIDs {
		j := s.jobs[id]
		if j == nil || j.State != StateScheduled || j.ReservedBy != key {
			not = append(not, id)
			continue
		}
		expires := s.now().Add(time.Duration(body.Lifetime) * time.Second)
		if j.ReservedUntil.Before(expires) {
			expires = j.ReservedUntil
		}
		t := token("bkjat_")
		s.jats[t] = jat{job: id, stack: key, expires: expires}
		tokens = append(tokens, issued{Job: id, Token: t, Expires: expires})
	}
	reply(w, http.StatusOK, map[string]any{"job_acquisition_tokens": tokens, "not_issued": not})
}

func (s *Server) states(w http.ResponseWriter, r *http.Request) {
	var body struct {
		JobUUIDs []string `json:"job_uuids"`
	}
	if !decode(w, r, &body) {
		return
	}
	states := map[string]string{}
	for _, id := range body.JobUUIDs {
		if j := s.jobs[id]; j != nil {
			states[id] = j.State
		}
	}
	reply(w, http.StatusOK, map[string]any{"states": states})
}

// finish ends a job the stack reserved and no agent runs (the stack could
// not start it).
func (s *Server) finish(w http.ResponseWriter, r *http.Request, key, id string) {
	var body struct {
		ExitStatus int    `json:"exit_status"`
		Detail     string `json:"detail"`
	}
	if !decode(w, r, &body) {
		return
	}
	j := s.jobs[id]
	switch {
	case j == nil:
		refuse(w, http.StatusNotFound, "No job found")
	case j.State != StateScheduled || j.ReservedBy != key:
		refuse(w, http.StatusUnprocessableEntity, fmt.Sprintf("job %s is %s and not reserved by stack %s", id, j.State, key))
	default:
		j.State, j.ExitStatus, j.Detail = StateFinished, body.ExitStatus, body.Detail
		reply(w, http.StatusOK, struct{}{})
	}
}

// registerAgent registers an agent with a job acquisition token (it may
// acquire that job only) or the cluster agent token.
func (s *Server) registerAgent(w http.ResponseWriter, r *http.Request, auth string) {
	var body struct {
		Name string `json:"name"`
	}
	if !decode(w, r, &body) {
		return
	}
	a := agent{name: body.Name}
	switch t, ok := s.jats[auth]; {
	case ok:
		j := s.jobs[t.job]
		if !s.now().Before(t.expires) || j == nil || j.ReservedBy != t.stack {
			refuse(w, http.StatusUnauthorized, "Invalid registration token: the job acquisition token has expired or its reservation ended")
			return
		}
		delete(s.jats, auth)
		a.job = t.job
	case auth != "" && auth == s.AgentToken:
	default:
		refuse(w, http.StatusUnauthorized, "Invalid registration token")
		return
	}
	access := token("bkaa_")
	s.agents[access] = a
	reply(w, http.StatusOK, map[string]any{"id": uuid(), "name": a.name, "access_token": access, "endpoint": s.URL()})
}

// agentJob is an agent acquiring, then finishing, a job.
func (s *Server) agentJob(w http.ResponseWriter, r *http.Request, auth, id, action string) {
	a, ok := s.agents[auth]
	if !ok {
		refuse(w, http.StatusUnauthorized, "Invalid access token")
		return
	}
	j := s.jobs[id]
	if j == nil {
		refuse(w, http.StatusNotFound, "No job found")
		return
	}
	switch action {
	case "acquire":
		switch {
		case a.job != "" && a.job != id:
			refuse(w, http.StatusForbidden, "this agent's job acquisition token is for another job")
		case j.State != StateScheduled:
			refuse(w, http.StatusUnprocessableEntity, fmt.Sprintf("job %s is %s and cannot be acquired", id, j.State))
		default:
			j.State, j.Agent, j.ReservedBy = StateRunning, a.name, ""
			j.Acquisitions++
			reply(w, http.StatusOK, map[string]any{"id": j.ID, "state": j.State, "env": map[string]string{"BUILDKITE_JOB_ID": j.ID,
				"BUILDKITE_COMMAND": j.Command}})
		}
	case "finish":
		var body struct {
			ExitStatus string `json:"exit_status"`
			Output     string `json:"output"`
		}
		if !decode(w, r, &body) {
			return
		}
		if j.State != StateRunning || j.Agent != a.name {
			refuse(w, http.StatusUnprocessableEntity, fmt.Sprintf("job %s is not running on agent %s", id, a.name))
			return
		}
		j.State, j.Output = StateFinished, body.Output
		j.ExitStatus, _ = strconv.Atoi(body.ExitStatus)
		reply(w, http.StatusOK, map[string]any{"id": j.ID, "state": j.State})
	default:
		refuse(w, http.StatusNotFound, "Not Found")
	}
}
