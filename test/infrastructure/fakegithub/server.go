package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a fake GitHub. The zero value gives a server that
// accepts any token for any organisation or repository.
type Options struct {
	// Apps are the GitHub App installations whose JSON web tokens the
	// server accepts; each installation token it issues is valid for an
	// hour.
	Apps []App
	// Tokens are the personal access tokens the server accepts. When
	// neither Tokens nor Apps are given, any non-empty token is accepted.
	Tokens []string
	// Orgs are the organisations that exist (their repositories exist
	// too). When neither Orgs nor Repos are given, every organisation and
	// repository exists.
	Orgs []string
	// Repos are further repositories that exist, as "owner/repo".
	Repos []string
	// RunnerGroups are runner groups besides "default" (id 1), which
	// always exists; they get ids 2, 3, … in this order.
	RunnerGroups []string
	// PollWait is how long a message queue poll waits for a message before
	// it answers 202 with nothing; 2 s by default (GitHub waits about 50 s).
	PollWait time.Duration
	// SessionTTL is how long a message session lives after its creation or
	// its last poll; 2 minutes by default.
	SessionTTL time.Duration
	// LostRunnerGrace is how long a runner that lost its connection while
	// running a job has to come back before the job fails; 2 s by default.
	LostRunnerGrace time.Duration
	// QueueTokenTTL is how long a session's message queue token is valid;
	// the scale-set client refreshes the session when it has expired. An
	// hour by default.
	QueueTokenTTL time.Duration
}

// App is a GitHub App installation the server knows. An app installed
// more than once is given once per installation.
type App struct {
	// AppID is the app's numeric id, the issuer of its JSON web tokens.
	AppID int64
	// ClientID is the app's client id ("Iv1.…"), which GitHub also
	// accepts as the issuer; optional.
	ClientID string
	// InstallationID is the installation's id.
	InstallationID int64
	// PublicKey verifies the app's JSON web tokens.
	PublicKey *rsa.PublicKey
}

// Server is a running fake GitHub. Its methods are safe for concurrent
// use.
type Server struct {
	opts    Options
	hs      *httptest.Server
	url     string
	signKey []byte
	done    chan struct{}

	mu      sync.Mutex
	closed  bool
	changed chan struct{} // closed and replaced on every change of state

	requests  map[string]int
	failUntil time.Time
	// sessionsOpened counts the message sessions ever opened.
	sessionsOpened int
	// dropSessionCloses: see DropSessionCloses.
	dropSessionCloses bool
	// unlabelledREST: see UnlabelRESTRunners.
	unlabelledREST bool
	failStatus     int
	rateUntil      time.Time

	groups     []runnerGroup
	instTokens map[string]installationToken
	regTokens  map[string]registrationToken
	scaleSets  map[int]*scaleSet
	sessions   map[string]*session
	// expired are the sessions that lapsed unpolled, by id, with their
	// scale set.
	expired     map[string]*scaleSet
	jobs        []*job
	jobsByID    map[string]*job
	runners     map[int]*runner // registered runners
	allRunners  []*runner       // every runner ever registered
	labelIDs    map[string]int64
	timers      map[*time.Timer]struct{}
	nextSetID   int
	nextRunner  int
	nextRequest int64
	nextRun     int64
	nextConnect int64
}

type runnerGroup struct {
	id   int
	name string
}

type installationToken struct {
	installationID int64
	expires        time.Time
}

type registrationToken struct {
	scope   scope
	expires time.Time
}

// New starts a fake GitHub on a local address.
func New(opts Options) *Server {
	if opts.PollWait <= 0 {
		opts.PollWait = 2 * time.Second
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 2 * time.Minute
	}
	if opts.LostRunnerGrace <= 0 {
		opts.LostRunnerGrace = 2 * time.Second
	}
	if opts.QueueTokenTTL <= 0 {
		opts.QueueTokenTTL = time.Hour
	}
	s := &Server{
		opts:       opts,
		signKey:    make([]byte, 32),
		done:       make(chan struct{}),
		changed:    make(chan struct{}),
		requests:   map[string]int{},
		groups:     []runnerGroup{{id: 1, name: "default"}},
		instTokens: map[string]installationToken{},
		regTokens:  map[string]registrationToken{},
		scaleSets:  map[int]*scaleSet{},
		sessions:   map[string]*session{},
		expired:    map[string]*scaleSet{},
		jobsByID:   map[string]*job{},
		runners:    map[int]*runner{},
		labelIDs:   map[string]int64{},
		timers:     map[*time.Timer]struct{}{},
	}
	if _, err := rand.Read(s.signKey); err != nil {
		panic(err)
	}
	for i, name := range opts.RunnerGroups {
		s.groups = append(s.groups, runnerGroup{id: i + 2, name: name})
	}
	mux := http.NewServeMux()
	s.routes(mux)
	s.hs = httptest.NewUnstartedServer(mux)
	s.url = "http://" + s.hs.Listener.Addr().String()
	s.hs.Start()
	return s
}

// URL is the server's address, without a trailing slash.
func (s *Server) URL() string { return s.url }

// Close ends every long poll and runner connection, stops the server and
// waits for its handlers to return.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	for t := range s.timers {
		t.Stop()
	}
	clear(s.timers)
	s.broadcastLocked()
	s.mu.Unlock()
	s.hs.Close()
}

// SetSessionTTL changes how long a message session lives unpolled
// (Options.SessionTTL), for sessions old and new.
func (s *Server) SetSessionTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.SessionTTL = d
}

// SessionsOpened is how many message sessions were opened since the
// server started.
func (s *Server) SessionsOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionsOpened
}

// FailFor makes every endpoint but the fake runner's answer status (503,
// say) until d has passed.
func (s *Server) FailFor(d time.Duration, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status < 100 || status > 599 {
		status = http.StatusServiceUnavailable
	}
	s.failUntil = time.Now().Add(d)
	s.failStatus = status
}

// RateLimitFor makes every endpoint but the fake runner's answer as GitHub
// does when a primary rate limit is exhausted (403 with
// X-RateLimit-Remaining: 0) until d has passed.
func (s *Server) RateLimitFor(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateUntil = time.Now().Add(d)
}

// broadcastLocked wakes every long poll and runner connection.
func (s *Server) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// afterFuncLocked runs f under the lock after d, unless the server closes
// first.
func (s *Server) afterFuncLocked(d time.Duration, f func()) *time.Timer {
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		delete(s.timers, t)
		f()
	})
	s.timers[t] = struct{}{}
	return t
}

// stopTimerLocked stops a timer made by afterFuncLocked.
func (s *Server) stopTimerLocked(t *time.Timer) {
	if t != nil {
		t.Stop()
		delete(s.timers, t)
	}
}

type handlerFunc func(w http.ResponseWriter, r *http.Request)

// handle registers a route counted under key; faults apply unless noFault.
func (s *Server) handle(mux *http.ServeMux, pattern, key string, noFault bool, h handlerFunc) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[key]++
		now := time.Now()
		rateLimited := !noFault && now.Before(s.rateUntil)
		rateReset := s.rateUntil
		failing := !noFault && now.Before(s.failUntil)
		failStatus := s.failStatus
		var who string
		if rateLimited {
			who = s.rateLimitSubjectLocked(r)
		}
		s.mu.Unlock()
		switch {
		case rateLimited:
			reset := rateReset.Unix()
			if rateReset.Nanosecond() > 0 {
				reset++
			}
			w.Header().Set("X-RateLimit-Limit", "5000")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Used", "5000")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
			w.Header().Set("X-RateLimit-Resource", "core")
			writeJSON(w, http.StatusForbidden, githubError{
				Message:          "API rate limit exceeded for " + who + ".",
				DocumentationURL: "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting",
			})
		case failing:
			writeJSON(w, failStatus, githubError{Message: http.StatusText(failStatus)})
		default:
			h(w, r)
		}
	})
}

// rateLimitSubjectLocked names what GitHub would say the exhausted limit
// belongs to.
func (s *Server) rateLimitSubjectLocked(r *http.Request) string {
	if id := r.PathValue("id"); strings.HasPrefix(r.URL.Path, "/api/v3/app/installations/") && id != "" {
		return "installation ID " + id
	}
	if t, ok := s.instTokens[bearerToken(r)]; ok {
		return fmt.Sprintf("installation ID %d", t.installationID)
	}
	return "user ID 1"
}

func (s *Server) routes(mux *http.ServeMux) {
	h := func(pattern string, fn handlerFunc) { s.handle(mux, pattern, pattern, false, fn) }

	h(EndpointAccessToken, s.handleAccessToken)
	h(EndpointOrgRegistrationToken, s.handleRegistrationToken)
	h(EndpointRepoRegistrationToken, s.handleRegistrationToken)
	h(EndpointRunnerRegistration, s.handleRunnerRegistration)
	h(EndpointOrgRunners, s.handleListRunners)
	h(EndpointRepoRunners, s.handleListRunners)
	h(EndpointOrgRunner, s.handleGetRunner)
	h(EndpointRepoRunner, s.handleGetRunner)
	h(EndpointDeleteOrgRunner, s.handleDeleteRunner)
	h(EndpointDeleteRepoRunner, s.handleDeleteRunner)

	h(EndpointRunnerGroups, s.handleRunnerGroups)
	s.handle(mux, "GET /_actions/_apis/runtime/runnergroups", EndpointRunnerGroups, false, s.handleRunnerGroups)
	h(EndpointListScaleSets, s.handleListScaleSets)
	h(EndpointCreateScaleSet, s.handleCreateScaleSet)
	h(EndpointGetScaleSet, s.handleGetScaleSet)
	h(EndpointUpdateScaleSet, s.handleUpdateScaleSet)
	h(EndpointDeleteScaleSet, s.handleDeleteScaleSet)
	h(EndpointCreateSession, s.handleCreateSession)
	h(EndpointRefreshSession, s.handleRefreshSession)
	h(EndpointDeleteSession, s.handleDeleteSession)
	h(EndpointAcquireJobs, s.handleAcquireJobs)
	h(EndpointGenerateJITConfig, s.handleGenerateJITConfig)
	h(EndpointGetAgent, s.handleGetAgent)
	h(EndpointListAgents, s.handleListAgents)
	h(EndpointDeleteAgent, s.handleDeleteAgent)

	h(EndpointGetMessage, s.handleGetMessage)
	h(EndpointDeleteMessage, s.handleDeleteMessage)

	s.handle(mux, EndpointRunnerListen, EndpointRunnerListen, true, s.handleRunnerListen)
	s.handle(mux, EndpointQueueJob, EndpointQueueJob, true, s.handleQueueJob)
	s.handle(mux, EndpointListJobs, EndpointListJobs, true, s.handleListJobs)

	s.handle(mux, "/", EndpointUnknown, false, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, notFound)
	})
}

// githubError is the REST API's error body.
type githubError struct {
	Message          string `json:"message"`
	DocumentationURL string `json:"documentation_url,omitempty"`
	Status           string `json:"status,omitempty"`
}

var (
	notFound       = githubError{Message: "Not Found", DocumentationURL: "https://docs.github.com/rest", Status: "404"}
	badCredentials = githubError{Message: "Bad credentials", DocumentationURL: "https://docs.github.com/rest", Status: "401"}
)

// actionsException is the Actions service's error body; the scale-set
// client matches on typeName.
type actionsException struct {
	ID             string `json:"$id"`
	InnerException any    `json:"innerException"`
	Message        string `json:"message"`
	TypeName       string `json:"typeName"`
	TypeKey        string `json:"typeKey"`
	ErrorCode      int    `json:"errorCode"`
	EventID        int    `json:"eventId"`
}

// writeException answers with an Actions service exception. ns is the
// exception's .NET namespace, such as "GitHub.DistributedTask.WebApi".
func writeException(w http.ResponseWriter, status int, ns, key, format string, args ...any) {
	writeJSON(w, status, actionsException{
		ID:        "1",
		Message:   fmt.Sprintf(format, args...),
		TypeName:  ns + "." + key + ", " + ns,
		TypeKey:   key,
		ErrorCode: 0,
		EventID:   3000,
	})
}

const (
	nsRuntime = "GitHub.Actions.Runtime.WebApi"
	nsTask    = "GitHub.DistributedTask.WebApi"
)

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// bearerToken is the credential of an "Authorization: Bearer X" or
// "Authorization: token X" header.
func bearerToken(r *http.Request) string {
	return authToken(r, "bearer", "token")
}

// authToken is the credential after one of the given schemes.
func authToken(r *http.Request, schemes ...string) string {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok {
		return ""
	}
	for _, sc := range schemes {
		if strings.EqualFold(scheme, sc) {
			return strings.TrimSpace(cred)
		}
	}
	return ""
}

// UnlabelRESTRunners makes the REST API, while on, list scale-set runners
// without labels, as reports against GitHub's own scale-set controller say
// it may: a client that finds a set's runners there by label finds none.
func (s *Server) UnlabelRESTRunners(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlabelledREST = on
}

// DropSessionCloses makes the server, while on, answer a session's close
// without closing it, as if the listener had been killed before its close
// arrived: the session stays until it expires (Options.SessionTTL), and a
// new one for its scale set meets 409 until then.
func (s *Server) DropSessionCloses(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropSessionCloses = on
}

// queueJobRequest is the body of a job queued over HTTP (the sandbox's
// walk-through queues jobs with curl).
type queueJobRequest struct {
	Owner           string   `json:"owner"`
	Repo            string   `json:"repo"`
	Labels          []string `json:"labels"`
	DisplayName     string   `json:"displayName"`
	DurationSeconds float64  `json:"durationSeconds"`
}

// handleQueueJob queues a job as QueueJob does and answers its id.
func (s *Server) handleQueueJob(w http.ResponseWriter, r *http.Request) {
	var req queueJobRequest
	if !readJSON(w, r, &req) {
		return
	}
	if len(req.Labels) == 0 {
		writeJSON(w, http.StatusBadRequest, githubError{Message: "labels: give the runs-on labels, e.g. the scale set's name"})
		return
	}
	if req.Owner == "" {
		req.Owner = "acme"
	}
	if req.Repo == "" {
		req.Repo = "app"
	}
	id := s.QueueJob(Job{Owner: req.Owner, Repo: req.Repo, Labels: req.Labels, DisplayName: req.DisplayName,
		Duration: time.Duration(req.DurationSeconds * float64(time.Second))})
	writeJSON(w, http.StatusCreated, map[string]string{"id": id})
}

// handleListJobs answers every job, as Jobs does.
func (s *Server) handleListJobs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Jobs())
}
