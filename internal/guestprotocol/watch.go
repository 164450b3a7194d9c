package guestprotocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// A v2 agent also holds a watch: a long-lived POST to WatchPath naming the
// revision of the last answer it had (DesiredStateV2.Revision). The
// operator holds it until what a heartbeat would be answered differs from
// that revision (a task to hand over, new keys, a new binding), then
// answers the new revision, and the agent heartbeats at once to take it.
// With nothing new it answers the same revision after at most WatchHold,
// and the agent watches again. Heartbeats are then only the liveness
// report, at the interval the answer gives. An operator from before the
// watch answers 404 (ReasonUnsupported), and the agent heartbeats only.

// WatchPath is where a v2 agent POSTs a WatchRequest.
const WatchPath = "/" + VersionV2 + "/watch"

// WatchHold is the longest the operator holds a watch before it answers
// the unchanged revision.
const WatchHold = 50 * time.Second

// MaxWatchBodyBytes bounds a watch request.
const MaxWatchBodyBytes = 1 << 10

// WatchRequest asks to be answered once the machine's desired state is no
// longer the one of Revision.
type WatchRequest struct {
	Machine MachineRef `json:"machine"`
	// Revision is the Revision of the last answer the agent had; empty
	// before its first.
	Revision string `json:"revision"`
}

// WatchAnswer is the revision of what the machine's next heartbeat would
// be answered now: the request's own when nothing changed within the hold.
type WatchAnswer struct {
	Revision string `json:"revision"`
}

// DecodeWatch reads one watch request as strictly as a heartbeat.
func DecodeWatch(r io.Reader) (*WatchRequest, error) {
	w := &WatchRequest{}
	if err := decodeStrict(r, MaxWatchBodyBytes, w); err != nil {
		return nil, err
	}
	if w.Machine.Namespace == "" || w.Machine.Name == "" {
		return nil, errors.New("machine.namespace and machine.name are required")
	}
	if len(w.Machine.Namespace) > MaxStringBytes || len(w.Machine.Name) > MaxStringBytes || len(w.Revision) > MaxStringBytes {
		return nil, errors.New("machine.namespace, machine.name and revision are at most 256 bytes each")
	}
	return w, nil
}

// Revision names a v2 answer by what it makes the agent do: a digest of
// everything in it but the heartbeat interval and the revision itself. It
// is a digest, so a watch answer carries none of a task's secrets.
func Revision(state DesiredStateV2) string {
	state.HeartbeatIntervalSeconds = 0
	state.Revision = ""
	raw, err := json.Marshal(state)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:16])
}
