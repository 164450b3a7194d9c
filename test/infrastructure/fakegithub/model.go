package fakegithub

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// scope is an organisation (repo empty) or a repository.
type scope struct {
	owner, repo string
}

// String is "owner" or "owner/repo".
func (sc scope) String() string {
	if sc.repo == "" {
		return sc.owner
	}
	return sc.owner + "/" + sc.repo
}

// is reports whether two scopes name the same organisation or repository;
// GitHub's names are case-insensitive.
func (sc scope) is(o scope) bool {
	return strings.EqualFold(sc.owner, o.owner) && strings.EqualFold(sc.repo, o.repo)
}

// serves reports whether a runner registered at sc may run a job of
// owner/repo: an organisation's runners serve its repositories.
func (sc scope) serves(owner, repo string) bool {
	if !strings.EqualFold(sc.owner, owner) {
		return false
	}
	return sc.repo == "" || strings.EqualFold(sc.repo, repo)
}

type label struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type scaleSet struct {
	id        int
	name      string
	scope     scope
	groupID   int
	labels    []label
	setting   json.RawMessage
	createdOn time.Time
	deleted   bool

	capacity     int
	capacitySeen bool

	pending  []json.RawMessage // job messages not yet put in a queue message
	messages []queueMessage    // delivered or not, not yet deleted; ascending ids
	nextMsg  int
}

// hasLabels reports whether the scale set carries every label (its name
// is always one of its labels).
func (ss *scaleSet) hasLabels(want []string) bool {
	for _, w := range want {
		if strings.EqualFold(w, ss.name) {
			continue
		}
		if !slices.ContainsFunc(ss.labels, func(l label) bool { return strings.EqualFold(l.Name, w) }) {
			return false
		}
	}
	return true
}

// labelNames are the scale set's labels, its name first.
func (ss *scaleSet) labelNames() []string {
	names := []string{ss.name}
	for _, l := range ss.labels {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, l.Name) }) {
			names = append(names, l.Name)
		}
	}
	return names
}

type queueMessage struct {
	id   int
	body string
}

type session struct {
	id       string
	set      *scaleSet
	owner    string
	token    string
	expires  time.Time // when token expires
	created  time.Time
	lastSeen time.Time
	polls    int // polls in progress
	deleted  bool
}

// JobState is where a job is in its life.
type JobState string

// The states of a job.
const (
	// JobQueued is a job no scale set has been offered yet: none matches
	// it, or those that do are at their capacity.
	JobQueued JobState = "queued"
	// JobAvailable is a job offered to a scale set (a JobAvailable
	// message) and not yet acquired.
	JobAvailable JobState = "available"
	// JobAssigned is a job the scale set acquired, waiting for a runner.
	JobAssigned JobState = "assigned"
	// JobRunning is a job a runner is running.
	JobRunning JobState = "running"
	// JobCompleted is a finished job; its result says how it ended.
	JobCompleted JobState = "completed"
)

// The results of a job, as the JobCompleted message says them.
const (
	// ResultSucceeded is a job that ran to its end.
	ResultSucceeded = "succeeded"
	// ResultFailed is a job that failed, or whose runner was lost.
	ResultFailed = "failed"
	// ResultCanceled is a job cancelled before or while it ran, or an
	// assignment taken back.
	ResultCanceled = "canceled"
)

type job struct {
	id          string
	owner, repo string
	labels      []string
	displayName string
	duration    time.Duration
	endResult   string
	runID       int64

	state     JobState
	result    string
	set       *scaleSet
	requestID int64
	runner    *runner
	attempts  int
	workDone  bool // ran for its duration while its runner was away
	timer     *time.Timer

	queueTime, setAssignTime, runnerAssignTime, finishTime time.Time
}

type runner struct {
	id      int
	name    string
	set     *scaleSet
	secret  string
	created time.Time

	online    bool
	conn      int64 // connection generation
	onlineSeq int64 // order in which idle runners are given jobs
	job       *job
	jobsRun   int
	finished  bool   // ran its job and left
	result    string // its job's result, when finished
	removed   bool   // removed by an API call before running a job
	lostGen   int
}

// statsLocked counts a scale set's jobs and runners now.
func (s *Server) statsLocked(ss *scaleSet) Statistics {
	var st Statistics
	for _, j := range s.jobs {
		if j.set != ss {
			continue
		}
		switch j.state {
		case JobAvailable:
			st.TotalAvailableJobs++
		case JobAssigned:
			st.TotalAcquiredJobs++
			st.TotalAssignedJobs++
		case JobRunning:
			st.TotalAssignedJobs++
			st.TotalRunningJobs++
		}
	}
	for _, r := range s.runners {
		if r.set != ss {
			continue
		}
		st.TotalRegisteredRunners++
		if r.job != nil {
			st.TotalBusyRunners++
		} else {
			st.TotalIdleRunners++
		}
	}
	return st
}

// sortedSetsLocked are the scale sets by id.
func (s *Server) sortedSetsLocked() []*scaleSet {
	sets := make([]*scaleSet, 0, len(s.scaleSets))
	for _, ss := range s.scaleSets {
		sets = append(sets, ss)
	}
	slices.SortFunc(sets, func(a, b *scaleSet) int { return a.id - b.id })
	return sets
}

// settleLocked brings the model to rest after a change: queued jobs are
// offered to scale sets with room, acquired jobs go to idle online
// runners, and every waiter is woken.
func (s *Server) settleLocked() {
	sets := s.sortedSetsLocked()
	active := map[*scaleSet]int{}
	for _, j := range s.jobs {
		if j.set != nil && (j.state == JobAvailable || j.state == JobAssigned || j.state == JobRunning) {
			active[j.set]++
		}
	}
	for _, j := range s.jobs {
		if j.state != JobQueued {
			continue
		}
		for _, ss := range sets {
			if !ss.scope.serves(j.owner, j.repo) || !ss.hasLabels(j.labels) {
				continue
			}
			if ss.capacitySeen && active[ss] >= ss.capacity {
				continue
			}
			s.offerLocked(j, ss)
			active[ss]++
			break
		}
	}
	for _, ss := range sets {
		s.dispatchLocked(ss)
	}
	s.broadcastLocked()
}

// offerLocked offers a job to a scale set under a new runner request id.
func (s *Server) offerLocked(j *job, ss *scaleSet) {
	s.nextRequest++
	j.state = JobAvailable
	j.set = ss
	j.requestID = s.nextRequest
	j.attempts++
	j.setAssignTime, j.runnerAssignTime = time.Time{}, time.Time{}
	s.emitLocked(ss, j, jobMessage{MessageType: "JobAvailable", AcquireJobURL: s.acquireURL(ss)})
}

// dispatchLocked gives the scale set's acquired jobs to its idle online
// runners, oldest first on both sides.
func (s *Server) dispatchLocked(ss *scaleSet) {
	var waiting []*job
	for _, j := range s.jobs {
		if j.set == ss && j.state == JobAssigned {
			waiting = append(waiting, j)
		}
	}
	if len(waiting) == 0 {
		return
	}
	slices.SortStableFunc(waiting, func(a, b *job) int { return a.setAssignTime.Compare(b.setAssignTime) })
	var idle []*runner
	for _, r := range s.runners {
		if r.set == ss && r.online && r.job == nil && r.jobsRun == 0 && !r.finished && !r.removed {
			idle = append(idle, r)
		}
	}
	slices.SortFunc(idle, func(a, b *runner) int { return int(a.onlineSeq - b.onlineSeq) })
	for i := 0; i < len(waiting) && i < len(idle); i++ {
		s.startLocked(waiting[i], idle[i])
	}
}

// startLocked starts a job on a runner.
func (s *Server) startLocked(j *job, r *runner) {
	j.state = JobRunning
	j.runner = r
	j.runnerAssignTime = time.Now().UTC()
	r.job = j
	r.jobsRun++
	s.emitLocked(j.set, j, jobMessage{MessageType: "JobStarted", RunnerID: r.id, RunnerName: r.name})
	j.timer = s.afterFuncLocked(j.duration, func() {
		j.timer = nil
		if j.state != JobRunning {
			return
		}
		if !j.runner.online {
			j.workDone = true // it ends when the runner comes back, or fails
			return
		}
		s.finishLocked(j, j.endResult)
		s.settleLocked()
	})
}

// finishLocked ends a job with result. A runner that ran it leaves.
// Callers settle afterwards.
func (s *Server) finishLocked(j *job, result string) {
	s.stopTimerLocked(j.timer)
	j.timer = nil
	prev := j.state
	j.state = JobCompleted
	j.result = result
	j.finishTime = time.Now().UTC()
	if prev == JobQueued {
		return
	}
	msg := jobMessage{MessageType: "JobCompleted", Result: result}
	if r := j.runner; r != nil {
		msg.RunnerID, msg.RunnerName = r.id, r.name
		r.finished = true
		r.result = result
		r.lostGen++
		s.deregisterLocked(r)
	}
	s.emitLocked(j.set, j, msg)
}

// deregisterLocked takes a runner off the runner lists.
func (s *Server) deregisterLocked(r *runner) {
	delete(s.runners, r.id)
}

// jobMessage is one job message in a queue message's body.
type jobMessage struct {
	MessageType        string    `json:"messageType"`
	AcquireJobURL      string    `json:"acquireJobUrl,omitempty"`
	Result             string    `json:"result,omitempty"`
	RunnerID           int       `json:"runnerId,omitempty"`
	RunnerName         string    `json:"runnerName,omitempty"`
	RunnerRequestID    int64     `json:"runnerRequestId"`
	RepositoryName     string    `json:"repositoryName"`
	OwnerName          string    `json:"ownerName"`
	JobID              string    `json:"jobId"`
	JobWorkflowRef     string    `json:"jobWorkflowRef"`
	JobDisplayName     string    `json:"jobDisplayName"`
	WorkflowRunID      int64     `json:"workflowRunId"`
	EventName          string    `json:"eventName"`
	RequestLabels      []string  `json:"requestLabels"`
	QueueTime          time.Time `json:"queueTime"`
	ScaleSetAssignTime time.Time `json:"scaleSetAssignTime"`
	RunnerAssignTime   time.Time `json:"runnerAssignTime"`
	FinishTime         time.Time `json:"finishTime"`
}

// emitLocked queues a job message for the scale set, filled in from the
// job as it is now.
func (s *Server) emitLocked(ss *scaleSet, j *job, m jobMessage) {
	if ss == nil || ss.deleted {
		return
	}
	m.RunnerRequestID = j.requestID
	m.RepositoryName = j.repo
	m.OwnerName = j.owner
	m.JobID = j.id
	m.JobWorkflowRef = j.owner + "/" + j.repo + "/.github/workflows/ci.yml@refs/heads/main"
	m.JobDisplayName = j.displayName
	m.WorkflowRunID = j.runID
	m.EventName = "push"
	m.RequestLabels = slices.Clone(j.labels)
	if m.RequestLabels == nil {
		m.RequestLabels = []string{}
	}
	m.QueueTime = j.queueTime
	m.ScaleSetAssignTime = j.setAssignTime
	m.RunnerAssignTime = j.runnerAssignTime
	m.FinishTime = j.finishTime
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	ss.pending = append(ss.pending, b)
}

// acquireURL is the address a JobAvailable message points at.
func (s *Server) acquireURL(ss *scaleSet) string {
	return s.url + "/_actions/_apis/runtime/runnerscalesets/" + itoa(ss.id) + "/acquirejobs?api-version=6.0-preview"
}
