package guestprotocol

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Version 2 adds tasks: the operator hands the agent the bound claim's
// bootstrap in its answer, and the agent reports what became of it in its
// heartbeats. A v2 agent posts to HeartbeatPathV2; an operator from before
// v2 answers that path 404 (ReasonUnsupported), and the agent then speaks
// v1 (HeartbeatPath), which runs no task. The operator tells the two apart
// by the path.

// VersionV2 is the second protocol version.
const VersionV2 = "v2"

// HeartbeatPathV2 is where a v2 agent POSTs a HeartbeatV2.
const HeartbeatPathV2 = "/" + VersionV2 + "/heartbeat"

// MaxBodyBytesV2 bounds a v2 heartbeat, which carries task reports.
const MaxBodyBytesV2 = 64 << 10

// MaxAnswerBytesV2 bounds a v2 answer, which carries tasks with their
// scripts, environment and files.
const MaxAnswerBytesV2 = 4 << 20

// MaxTasks bounds the tasks of a heartbeat or an answer.
const MaxTasks = 8

// Limits of a task report.
const (
	MaxTaskIDBytes      = 128
	MaxOutputTailBytes  = 4096
	MaxTaskMessageBytes = 1024
)

// MaxDurationMillis bounds a reported duration: longer than the longest
// timeout a task may have (a day), with room.
const MaxDurationMillis = 7 * 24 * 3600 * 1000

// HeartbeatV2 is a v1 heartbeat plus the reports of the tasks the agent
// holds for its current binding.
type HeartbeatV2 struct {
	Heartbeat `json:",inline"`
	// Tasks are the tasks of the binding the last answer named, as they
	// are now; a task the agent has not taken yet is absent.
	Tasks []TaskReport `json:"tasks,omitempty"`
}

// TaskState is where a task is. The values are those of the MacClaim API's
// bootstrap states.
type TaskState string

// The states a task report carries.
const (
	TaskRunning   TaskState = "Running"
	TaskSucceeded TaskState = "Succeeded"
	TaskFailed    TaskState = "Failed"
	TaskTimedOut  TaskState = "TimedOut"
)

// TaskReport is what became of one task.
type TaskReport struct {
	ID    string    `json:"id"`
	State TaskState `json:"state"`
	// ExitCode is the script's exit status once it exited by itself.
	ExitCode  *int      `json:"exitCode,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// DurationMillis is how long it ran, once finished.
	DurationMillis int64 `json:"durationMillis,omitempty"`
	// OutputTail is the end of the output so far, with every value of the
	// task's Mask replaced by MaskText; at most MaxOutputTailBytes.
	OutputTail string `json:"outputTail,omitempty"`
	// Message says why it failed when no exit status does.
	Message string `json:"message,omitempty"`
}

// MacOSTaskDir is where the agent keeps a directory per task in macOS; a
// task's whole output is <MacOSTaskDir>/<id>/output.log.
const MacOSTaskDir = "/var/db/macvirt-agent/tasks"

// MaskText replaces a masked value in reported output.
const MaskText = "******"

// DesiredStateV2 is the v2 answer: the v1 desired state plus the binding
// and the tasks the agent has not reported yet.
type DesiredStateV2 struct {
	DesiredState `json:",inline"`
	// Binding is the UID of the claim the machine is bound to; empty while
	// unbound. Tasks of another binding that still run are stopped.
	Binding string `json:"binding"`
	// Tasks are to be run in order, one at a time, each exactly once.
	Tasks []Task `json:"tasks,omitempty"`
	// Revision names this answer (Revision) for the agent's watch
	// (watch.go); an operator from before the watch sends none.
	Revision string `json:"revision,omitempty"`
}

// Task is work the agent does once: place the files, then run the script
// under /bin/sh as User with Env, for at most TimeoutSeconds.
type Task struct {
	ID             string   `json:"id"`
	Script         string   `json:"script,omitempty"`
	Env            []EnvVar `json:"env,omitempty"`
	Files          []File   `json:"files,omitempty"`
	User           string   `json:"user"`
	TimeoutSeconds int      `json:"timeoutSeconds"`
	// Mask are values (those of Secrets) the agent never reports: every
	// occurrence in the output tail is replaced by MaskText.
	Mask []string `json:"mask,omitempty"`
}

// EnvVar is one environment variable of a task.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// File is one file a task places.
type File struct {
	Path    string `json:"path"`
	Mode    uint32 `json:"mode"`
	Owner   string `json:"owner"`
	Content []byte `json:"content"`
}

// TaskID is the id of a part of a binding's bootstrap: the claim's UID and
// the part, so a machine bound again runs the new claim's tasks and never
// the old ones. It is a file name on the guest.
func TaskID(claimUID, part string) string { return claimUID + "-" + part }

// DecodeHeartbeatV2 reads one v2 heartbeat as strictly as DecodeHeartbeat
// reads v1.
func DecodeHeartbeatV2(r io.Reader) (*HeartbeatV2, error) {
	h := &HeartbeatV2{}
	if err := decodeStrict(r, MaxBodyBytesV2, h); err != nil {
		return nil, err
	}
	return h, h.Validate()
}

// Validate checks the v1 fields and the task reports.
func (h *HeartbeatV2) Validate() error {
	errs := []error{h.Heartbeat.Validate()}
	if len(h.Tasks) > MaxTasks {
		errs = append(errs, fmt.Errorf("tasks has more than %d entries", MaxTasks))
	}
	for i, t := range h.Tasks {
		switch {
		case t.ID == "" || len(t.ID) > MaxTaskIDBytes || strings.ContainsAny(t.ID, "/\\"):
			errs = append(errs, fmt.Errorf("tasks[%d].id must be 1 to %d bytes without slashes", i, MaxTaskIDBytes))
		case t.State != TaskRunning && t.State != TaskSucceeded && t.State != TaskFailed && t.State != TaskTimedOut:
			errs = append(errs, fmt.Errorf("tasks[%d].state %.32q is none of Running, Succeeded, Failed, TimedOut", i, t.State))
		case len(t.OutputTail) > MaxOutputTailBytes:
			errs = append(errs, fmt.Errorf("tasks[%d].outputTail is longer than %d bytes", i, MaxOutputTailBytes))
		case len(t.Message) > MaxTaskMessageBytes:
			errs = append(errs, fmt.Errorf("tasks[%d].message is longer than %d bytes", i, MaxTaskMessageBytes))
		case t.DurationMillis < 0 || t.DurationMillis > MaxDurationMillis:
			errs = append(errs, fmt.Errorf("tasks[%d].durationMillis is not between 0 and %d", i, MaxDurationMillis))
		case t.ExitCode != nil && (*t.ExitCode < 0 || *t.ExitCode > 255):
			errs = append(errs, fmt.Errorf("tasks[%d].exitCode is not between 0 and 255", i))
		case t.ExitCode != nil && t.State != TaskSucceeded && t.State != TaskFailed:
			errs = append(errs, fmt.Errorf("tasks[%d] is %s and has an exit code", i, t.State))
		}
	}
	return errors.Join(errs...)
}
