package fakegithub

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Job is a workflow job a test queues.
type Job struct {
	// Owner and Repo name the repository the job runs for. Scale sets of
	// the organisation Owner and of the repository Owner/Repo may run it.
	Owner, Repo string
	// Labels are the job's runs-on labels; a scale set runs it when it
	// carries them all (its name counts as one of its labels).
	Labels []string
	// DisplayName is the job's name in messages and the runner's output;
	// "build" when empty.
	DisplayName string
	// Duration is how long the job runs once a runner starts it.
	Duration time.Duration
	// Result is how the job ends when it runs its whole Duration:
	// ResultSucceeded when empty, or ResultFailed.
	Result string
}

// QueueJob queues a job and returns its id. It is offered at once to the
// first scale set (by id) that matches it and has room, as a JobAvailable
// message; otherwise it waits in the queue.
func (s *Server) QueueJob(j Job) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.DisplayName == "" {
		j.DisplayName = "build"
	}
	if j.Result == "" {
		j.Result = ResultSucceeded
	}
	s.nextRun++
	jb := &job{
		id:          newUUID(),
		owner:       j.Owner,
		repo:        j.Repo,
		labels:      slices.Clone(j.Labels),
		displayName: j.DisplayName,
		duration:    j.Duration,
		endResult:   j.Result,
		runID:       s.nextRun,
		state:       JobQueued,
		queueTime:   time.Now().UTC(),
	}
	s.jobs = append(s.jobs, jb)
	s.jobsByID[jb.id] = jb
	s.settleLocked()
	return jb.id
}

// CancelJob cancels a job, as a user cancelling its workflow run. A job
// not yet started is withdrawn; a running job stops and its runner leaves.
// Either way the scale set gets a JobCompleted message with result
// "canceled".
func (s *Server) CancelJob(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobsByID[id]
	if !ok {
		return fmt.Errorf("no job %s", id)
	}
	if j.state == JobCompleted {
		return fmt.Errorf("job %s already completed with result %s", id, j.result)
	}
	s.finishLocked(j, ResultCanceled)
	s.settleLocked()
	return nil
}

// Reassign takes an acquired job that no runner has started back from its
// scale set, as GitHub does when a scale set holds a job too long: a
// JobCompleted message with result "canceled" ends the assignment, and the
// job is offered again under a new runner request id (a new JobAvailable
// message with the same job id).
func (s *Server) Reassign(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobsByID[id]
	if !ok {
		return fmt.Errorf("no job %s", id)
	}
	if j.state != JobAssigned {
		return fmt.Errorf("job %s is %s, not assigned and waiting for a runner", id, j.state)
	}
	j.finishTime = time.Now().UTC()
	s.emitLocked(j.set, j, jobMessage{MessageType: "JobCompleted", Result: ResultCanceled})
	j.finishTime = time.Time{}
	s.offerLocked(j, j.set)
	s.settleLocked()
	return nil
}

// Statistics are a scale set's counters as sessions and messages report
// them.
type Statistics struct {
	// TotalAvailableJobs counts jobs offered and not yet acquired.
	TotalAvailableJobs int `json:"totalAvailableJobs"`
	// TotalAcquiredJobs counts acquired jobs no runner has started.
	TotalAcquiredJobs int `json:"totalAcquiredJobs"`
	// TotalAssignedJobs counts acquired jobs not yet completed, running
	// ones included.
	TotalAssignedJobs int `json:"totalAssignedJobs"`
	// TotalRunningJobs counts running jobs.
	TotalRunningJobs int `json:"totalRunningJobs"`
	// TotalRegisteredRunners counts registered runners.
	TotalRegisteredRunners int `json:"totalRegisteredRunners"`
	// TotalBusyRunners counts runners running a job.
	TotalBusyRunners int `json:"totalBusyRunners"`
	// TotalIdleRunners counts registered runners not running a job.
	TotalIdleRunners int `json:"totalIdleRunners"`
}

// JobView is a copy of a job's state.
type JobView struct {
	// ID is the job's id, as QueueJob returned it.
	ID string
	// Owner and Repo name the job's repository.
	Owner, Repo string
	// Labels are the job's runs-on labels.
	Labels []string
	// DisplayName is the job's name.
	DisplayName string
	// State is where the job is.
	State JobState
	// Result is how a completed job ended.
	Result string
	// ScaleSetID is the scale set the job was last offered to.
	ScaleSetID int
	// RunnerRequestID is the runner request id of the last offer.
	RunnerRequestID int64
	// RunnerID and RunnerName are the runner that started the job.
	RunnerID   int
	RunnerName string
	// Attempts counts the offers to scale sets.
	Attempts int
	// QueueTime, ScaleSetAssignTime, RunnerAssignTime and FinishTime are
	// when the job was queued, acquired, started and completed.
	QueueTime, ScaleSetAssignTime, RunnerAssignTime, FinishTime time.Time
}

// RunnerView is a copy of a registered runner's state.
type RunnerView struct {
	// ID is the runner's id.
	ID int
	// Name is the runner's name.
	Name string
	// ScaleSetID is the scale set the runner registered with.
	ScaleSetID int
	// Online reports whether the runner is connected.
	Online bool
	// Busy reports whether the runner runs a job.
	Busy bool
	// JobID is the job the runner runs.
	JobID string
	// JobsRun counts the jobs the runner started (at most one).
	JobsRun int
}

// ScaleSetView is a copy of a scale set's state.
type ScaleSetView struct {
	// ID is the scale set's id.
	ID int
	// Name is the scale set's name.
	Name string
	// Scope is the organisation or repository ("owner/repo") it belongs
	// to.
	Scope string
	// RunnerGroupID and RunnerGroupName are its runner group.
	RunnerGroupID   int
	RunnerGroupName string
	// Labels are its labels, its name first.
	Labels []string
	// Statistics are its counters now.
	Statistics Statistics
}

// SessionView is a copy of a live message session's state.
type SessionView struct {
	// ID is the session's id.
	ID string
	// ScaleSetID is the session's scale set.
	ScaleSetID int
	// OwnerName is the owner the listener gave.
	OwnerName string
	// Created is when the session was opened.
	Created time.Time
	// LastSeen is when the session last polled or was refreshed.
	LastSeen time.Time
	// Polling reports whether a poll is in progress.
	Polling bool
}

// Jobs are the jobs in the order they were queued.
func (s *Server) Jobs() []JobView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobView, 0, len(s.jobs))
	for _, j := range s.jobs {
		out = append(out, jobView(j))
	}
	return out
}

// Job is one job by id.
func (s *Server) Job(id string) (JobView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobsByID[id]
	if !ok {
		return JobView{}, false
	}
	return jobView(j), true
}

func jobView(j *job) JobView {
	v := JobView{
		ID:                 j.id,
		Owner:              j.owner,
		Repo:               j.repo,
		Labels:             slices.Clone(j.labels),
		DisplayName:        j.displayName,
		State:              j.state,
		Result:             j.result,
		RunnerRequestID:    j.requestID,
		Attempts:           j.attempts,
		QueueTime:          j.queueTime,
		ScaleSetAssignTime: j.setAssignTime,
		RunnerAssignTime:   j.runnerAssignTime,
		FinishTime:         j.finishTime,
	}
	if j.set != nil {
		v.ScaleSetID = j.set.id
	}
	if j.runner != nil {
		v.RunnerID, v.RunnerName = j.runner.id, j.runner.name
	}
	return v
}

// Runners are the registered runners by id. A runner leaves the list when
// it has run its job or is removed.
func (s *Server) Runners() []RunnerView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []RunnerView{}
	for _, id := range slices.Sorted(maps.Keys(s.runners)) {
		r := s.runners[id]
		v := RunnerView{ID: r.id, Name: r.name, ScaleSetID: r.set.id, Online: r.online, Busy: r.job != nil, JobsRun: r.jobsRun}
		if r.job != nil {
			v.JobID = r.job.id
		}
		out = append(out, v)
	}
	return out
}

// RunnerJobCounts counts the jobs started by every runner name ever
// registered, so a test can check no runner ran two.
func (s *Server) RunnerJobCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, r := range s.allRunners {
		out[r.name] += r.jobsRun
	}
	return out
}

// ScaleSets are the scale sets by id.
func (s *Server) ScaleSets() []ScaleSetView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []ScaleSetView{}
	for _, ss := range s.sortedSetsLocked() {
		g, _ := s.groupLocked(ss.groupID)
		out = append(out, ScaleSetView{
			ID:              ss.id,
			Name:            ss.name,
			Scope:           ss.scope.String(),
			RunnerGroupID:   ss.groupID,
			RunnerGroupName: g.name,
			Labels:          ss.labelNames(),
			Statistics:      s.statsLocked(ss),
		})
	}
	return out
}

// Sessions are the live message sessions, oldest first.
func (s *Server) Sessions() []SessionView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []SessionView{}
	for _, sess := range s.sessions {
		if s.liveLocked(sess) {
			out = append(out, SessionView{
				ID:         sess.id,
				ScaleSetID: sess.set.id,
				OwnerName:  sess.owner,
				Created:    sess.created,
				LastSeen:   sess.lastSeen,
				Polling:    sess.polls > 0,
			})
		}
	}
	slices.SortFunc(out, func(a, b SessionView) int { return a.Created.Compare(b.Created) })
	return out
}

// MaxCapacity is the X-ScaleSetMaxCapacity a scale set's listener last
// sent, or -1 when none has polled. While it is known the server offers
// the scale set no more jobs than that at once.
func (s *Server) MaxCapacity(scaleSetID int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.scaleSets[scaleSetID]
	if !ok || !ss.capacitySeen {
		return -1
	}
	return ss.capacity
}

// Requests counts the requests per route (the Endpoint constants), failed
// ones included.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}
