package fakegithub

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBatch is how many job messages one queue message carries at most.
const maxBatch = 50

// queueSessionLocked finds the live session of a queue request whose
// token matches, or answers 401 as the message queue does when its token
// expired.
func (s *Server) queueSessionLocked(w http.ResponseWriter, r *http.Request) *session {
	sess, ok := s.sessions[r.PathValue("sid")]
	if !ok || sess.token != authToken(r, "bearer") || !time.Now().Before(sess.expires) || !s.liveLocked(sess) {
		writeException(w, http.StatusUnauthorized, "GitHub.Services.WebApi", "VssUnauthorizedException",
			"TF400813: The message queue token is not valid for this session.")
		return nil
	}
	return sess
}

// nextMessageLocked is the first message not yet deleted whose id is above
// lastID; failing that, a new message of pending job messages; failing
// that, nil.
func (s *Server) nextMessageLocked(ss *scaleSet, lastID int) *queueMessage {
	for i := range ss.messages {
		if ss.messages[i].id > lastID {
			return &ss.messages[i]
		}
	}
	if len(ss.pending) == 0 {
		return nil
	}
	n := min(len(ss.pending), maxBatch)
	var b strings.Builder
	b.WriteByte('[')
	for i, m := range ss.pending[:n] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte(']')
	ss.pending = ss.pending[n:]
	ss.nextMsg++
	ss.messages = append(ss.messages, queueMessage{id: ss.nextMsg, body: b.String()})
	return &ss.messages[len(ss.messages)-1]
}

// handleGetMessage long-polls a session's message queue: it answers the
// next message with the scale set's statistics as they are now, or 202
// with no body after PollWait.
func (s *Server) handleGetMessage(w http.ResponseWriter, r *http.Request) {
	lastID, _ := strconv.Atoi(r.URL.Query().Get("lastMessageId"))
	s.mu.Lock()
	sess := s.queueSessionLocked(w, r)
	if sess == nil {
		s.mu.Unlock()
		return
	}
	ss := sess.set
	sess.polls++
	sess.lastSeen = time.Now()
	defer func() {
		sess.polls--
		sess.lastSeen = time.Now()
		s.mu.Unlock()
	}()
	if v := r.Header.Get("X-ScaleSetMaxCapacity"); v != "" {
		if c, err := strconv.Atoi(v); err == nil && c >= 0 && (!ss.capacitySeen || ss.capacity != c) {
			ss.capacity, ss.capacitySeen = c, true
			s.settleLocked()
		}
	}
	deadline := time.NewTimer(s.opts.PollWait)
	defer deadline.Stop()
	for {
		if sess.deleted {
			writeException(w, http.StatusUnauthorized, "GitHub.Services.WebApi", "VssUnauthorizedException",
				"TF400813: The message queue token is not valid for this session.")
			return
		}
		if m := s.nextMessageLocked(ss, lastID); m != nil {
			writeJSON(w, http.StatusOK, map[string]any{
				"messageId":   m.id,
				"messageType": "RunnerScaleSetJobMessages",
				"body":        m.body,
				"statistics":  s.statsLocked(ss),
			})
			return
		}
		if s.closed {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		changed := s.changed
		s.mu.Unlock()
		timedOut := false
		select {
		case <-changed:
		case <-deadline.C:
			timedOut = true
		case <-r.Context().Done():
			timedOut = true
		case <-s.done:
		}
		s.mu.Lock()
		if timedOut {
			w.WriteHeader(http.StatusAccepted)
			return
		}
	}
}

// handleDeleteMessage acknowledges a message: it is not delivered again.
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.queueSessionLocked(w, r)
	if sess == nil {
		return
	}
	sess.lastSeen = time.Now()
	id, err := strconv.Atoi(r.PathValue("mid"))
	if err != nil {
		writeException(w, http.StatusBadRequest, "GitHub.Services.WebApi", "ArgumentException", "The message id %q is not a number.", r.PathValue("mid"))
		return
	}
	ss := sess.set
	for i := range ss.messages {
		if ss.messages[i].id == id {
			ss.messages = append(ss.messages[:i], ss.messages[i+1:]...)
			break
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
