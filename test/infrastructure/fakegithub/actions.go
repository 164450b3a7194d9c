package fakegithub

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// adminScopeLocked checks the Actions service admin token of a request
// and returns the organisation or repository it was issued for, or
// answers 401.
func (s *Server) adminScopeLocked(w http.ResponseWriter, r *http.Request) (scope, bool) {
	if sc, ok := s.adminTokenScope(authToken(r, "bearer")); ok {
		return sc, true
	}
	writeException(w, http.StatusUnauthorized, "GitHub.Services.WebApi", "VssUnauthorizedException",
		"TF400813: The user is not authorized to access this resource.")
	return scope{}, false
}

// adminTokenScope reads the scope of a valid, unexpired admin token.
func (s *Server) adminTokenScope(tok string) (scope, bool) {
	claims, err := verifyHS256(tok, s.signKey)
	if err != nil {
		return scope{}, false
	}
	if exp, ok := claimInt(claims, "exp"); !ok || exp <= time.Now().Unix() {
		return scope{}, false
	}
	owner, repo, _ := strings.Cut(claimString(claims, "scp"), "/")
	if owner == "" {
		return scope{}, false
	}
	return scope{owner: owner, repo: repo}, true
}

// groupLocked finds a runner group by id.
func (s *Server) groupLocked(id int) (runnerGroup, bool) {
	for _, g := range s.groups {
		if g.id == id {
			return g, true
		}
	}
	return runnerGroup{}, false
}

type runnerGroupJSON struct {
	ID        int    `json:"id"`
	Name      string `json:"name"`
	Size      int    `json:"size"`
	IsDefault bool   `json:"isDefaultGroup"`
}

// handleRunnerGroups looks runner groups up by name.
func (s *Server) handleRunnerGroups(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.adminScopeLocked(w, r); !ok {
		return
	}
	name := r.URL.Query().Get("groupName")
	out := []runnerGroupJSON{}
	for _, g := range s.groups {
		if name != "" && !strings.EqualFold(g.name, name) {
			continue
		}
		size := 0
		for _, rn := range s.runners {
			if rn.set.groupID == g.id {
				size++
			}
		}
		out = append(out, runnerGroupJSON{ID: g.id, Name: g.name, Size: size, IsDefault: g.id == 1})
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "value": out})
}

type scaleSetJSON struct {
	ID                 int             `json:"id"`
	Name               string          `json:"name"`
	RunnerGroupID      int             `json:"runnerGroupId"`
	RunnerGroupName    string          `json:"runnerGroupName"`
	Labels             []label         `json:"labels"`
	RunnerSetting      json.RawMessage `json:"RunnerSetting"`
	CreatedOn          time.Time       `json:"createdOn"`
	RunnerJitConfigURL string          `json:"runnerJitConfigUrl"`
	Statistics         Statistics      `json:"statistics"`
	Enabled            bool            `json:"enabled"`
}

// scaleSetJSONLocked is a scale set as the Actions service shows it.
func (s *Server) scaleSetJSONLocked(ss *scaleSet) scaleSetJSON {
	g, _ := s.groupLocked(ss.groupID)
	setting := ss.setting
	if len(setting) == 0 {
		setting = json.RawMessage("{}")
	}
	return scaleSetJSON{
		ID:                 ss.id,
		Name:               ss.name,
		RunnerGroupID:      ss.groupID,
		RunnerGroupName:    g.name,
		Labels:             slices.Clone(ss.labels),
		RunnerSetting:      setting,
		CreatedOn:          ss.createdOn,
		RunnerJitConfigURL: s.url + "/_actions/_apis/runtime/runnerscalesets/" + itoa(ss.id) + "/generatejitconfig?api-version=6.0-preview",
		Statistics:         s.statsLocked(ss),
		Enabled:            true,
	}
}

// scaleSetLocked finds the scale set of the path's id within the token's
// scope, or answers 404.
func (s *Server) scaleSetLocked(w http.ResponseWriter, r *http.Request, sc scope) *scaleSet {
	id, err := strconv.Atoi(r.PathValue("id"))
	ss, ok := s.scaleSets[id]
	if err != nil || !ok || !ss.scope.is(sc) {
		writeException(w, http.StatusNotFound, nsRuntime, "RunnerScaleSetNotFoundException",
			"The runner scale set with id %s does not exist.", r.PathValue("id"))
		return nil
	}
	return ss
}

// handleListScaleSets looks scale sets up by runner group id and name.
func (s *Server) handleListScaleSets(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	groupID, _ := strconv.Atoi(q.Get("runnerGroupId"))
	name := q.Get("name")
	out := []scaleSetJSON{}
	for _, ss := range s.sortedSetsLocked() {
		if !ss.scope.is(sc) || (groupID != 0 && ss.groupID != groupID) || (name != "" && !strings.EqualFold(ss.name, name)) {
			continue
		}
		out = append(out, s.scaleSetJSONLocked(ss))
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "value": out})
}

type scaleSetRequest struct {
	Name          string          `json:"name"`
	RunnerGroupID int             `json:"runnerGroupId"`
	Labels        []label         `json:"labels"`
	RunnerSetting json.RawMessage `json:"RunnerSetting"`
}

// readJSON decodes a request body, answering 400 when it is not JSON.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		writeException(w, http.StatusBadRequest, "GitHub.Services.WebApi", "ArgumentException", "The request body is not valid JSON: %v", err)
		return false
	}
	return true
}

// nameTakenLocked reports whether another scale set of the scope and group
// has the name.
func (s *Server) nameTakenLocked(sc scope, groupID int, name string, except *scaleSet) bool {
	for _, ss := range s.scaleSets {
		if ss != except && ss.scope.is(sc) && ss.groupID == groupID && strings.EqualFold(ss.name, name) {
			return true
		}
	}
	return false
}

// defaultLabels gives labels without a type the type "System".
func defaultLabels(ls []label) []label {
	out := slices.Clone(ls)
	for i := range out {
		if out[i].Type == "" {
			out[i].Type = "System"
		}
	}
	return out
}

// handleCreateScaleSet creates a scale set in the token's scope.
func (s *Server) handleCreateScaleSet(w http.ResponseWriter, r *http.Request) {
	var req scaleSetRequest
	if !readJSON(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	if strings.TrimSpace(req.Name) == "" {
		writeException(w, http.StatusBadRequest, "GitHub.Services.WebApi", "ArgumentException", "The runner scale set name is required.")
		return
	}
	if req.RunnerGroupID == 0 {
		req.RunnerGroupID = 1
	}
	if _, ok := s.groupLocked(req.RunnerGroupID); !ok {
		writeException(w, http.StatusNotFound, nsRuntime, "RunnerGroupNotFoundException", "The runner group with id %d does not exist.", req.RunnerGroupID)
		return
	}
	if s.nameTakenLocked(sc, req.RunnerGroupID, req.Name, nil) {
		writeException(w, http.StatusConflict, nsRuntime, "RunnerScaleSetExistsException",
			"A runner scale set named %s already exists in runner group %d.", req.Name, req.RunnerGroupID)
		return
	}
	labels := defaultLabels(req.Labels)
	if len(labels) == 0 {
		labels = []label{{Type: "System", Name: req.Name}}
	}
	s.nextSetID++
	ss := &scaleSet{
		id:        s.nextSetID,
		name:      req.Name,
		scope:     sc,
		groupID:   req.RunnerGroupID,
		labels:    labels,
		setting:   req.RunnerSetting,
		createdOn: time.Now().UTC(),
	}
	s.scaleSets[ss.id] = ss
	s.settleLocked()
	writeJSON(w, http.StatusOK, s.scaleSetJSONLocked(ss))
}

// handleGetScaleSet gets a scale set by id.
func (s *Server) handleGetScaleSet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	if ss := s.scaleSetLocked(w, r, sc); ss != nil {
		writeJSON(w, http.StatusOK, s.scaleSetJSONLocked(ss))
	}
}

// handleUpdateScaleSet changes the fields a request gives.
func (s *Server) handleUpdateScaleSet(w http.ResponseWriter, r *http.Request) {
	var req scaleSetRequest
	if !readJSON(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	ss := s.scaleSetLocked(w, r, sc)
	if ss == nil {
		return
	}
	groupID, name := ss.groupID, ss.name
	if req.RunnerGroupID != 0 {
		if _, ok := s.groupLocked(req.RunnerGroupID); !ok {
			writeException(w, http.StatusNotFound, nsRuntime, "RunnerGroupNotFoundException", "The runner group with id %d does not exist.", req.RunnerGroupID)
			return
		}
		groupID = req.RunnerGroupID
	}
	if strings.TrimSpace(req.Name) != "" {
		name = req.Name
	}
	if s.nameTakenLocked(sc, groupID, name, ss) {
		writeException(w, http.StatusConflict, nsRuntime, "RunnerScaleSetExistsException",
			"A runner scale set named %s already exists in runner group %d.", name, groupID)
		return
	}
	ss.groupID, ss.name = groupID, name
	if len(req.Labels) > 0 {
		ss.labels = defaultLabels(req.Labels)
	}
	if len(req.RunnerSetting) > 0 {
		ss.setting = req.RunnerSetting
	}
	s.settleLocked()
	writeJSON(w, http.StatusOK, s.scaleSetJSONLocked(ss))
}

// handleDeleteScaleSet deletes a scale set: its sessions end and the jobs
// offered to it or acquired by it are queued again.
func (s *Server) handleDeleteScaleSet(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	ss := s.scaleSetLocked(w, r, sc)
	if ss == nil {
		return
	}
	ss.deleted = true
	delete(s.scaleSets, ss.id)
	for id, sess := range s.sessions {
		if sess.set == ss {
			sess.deleted = true
			delete(s.sessions, id)
		}
	}
	for _, j := range s.jobs {
		if j.set == ss && (j.state == JobAvailable || j.state == JobAssigned) {
			j.state, j.set, j.requestID = JobQueued, nil, 0
			j.setAssignTime = time.Time{}
		}
	}
	s.settleLocked()
	w.WriteHeader(http.StatusNoContent)
}

// liveLocked reports whether a session has neither been deleted nor
// expired; an expired one is dropped.
func (s *Server) liveLocked(sess *session) bool {
	if sess.deleted {
		return false
	}
	if sess.polls > 0 || time.Since(sess.lastSeen) < s.opts.SessionTTL {
		return true
	}
	sess.deleted = true
	delete(s.sessions, sess.id)
	s.expired[sess.id] = sess.set
	return false
}

type sessionJSON struct {
	SessionID               string       `json:"sessionId"`
	OwnerName               string       `json:"ownerName"`
	RunnerScaleSet          scaleSetJSON `json:"runnerScaleSet"`
	MessageQueueURL         string       `json:"messageQueueUrl"`
	MessageQueueAccessToken string       `json:"messageQueueAccessToken"`
	Statistics              Statistics   `json:"statistics"`
}

// sessionJSONLocked is a session as the Actions service shows it.
func (s *Server) sessionJSONLocked(sess *session) sessionJSON {
	return sessionJSON{
		SessionID:               sess.id,
		OwnerName:               sess.owner,
		RunnerScaleSet:          s.scaleSetJSONLocked(sess.set),
		MessageQueueURL:         s.url + "/_queue/" + sess.id,
		MessageQueueAccessToken: sess.token,
		Statistics:              s.statsLocked(sess.set),
	}
}

// handleCreateSession opens a scale set's message session; a scale set has
// at most one live session.
func (s *Server) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		OwnerName string `json:"ownerName"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	ss := s.scaleSetLocked(w, r, sc)
	if ss == nil {
		return
	}
	for _, other := range s.sessions {
		if other.set == ss && s.liveLocked(other) {
			writeException(w, http.StatusConflict, nsRuntime, "RunnerScaleSetSessionConflictException",
				"The actions runner scale set %s already has an active session for owner %s.", ss.name, other.owner)
			return
		}
	}
	now := time.Now()
	sess := &session{
		id:       newUUID(),
		set:      ss,
		owner:    req.OwnerName,
		token:    randomString(64, alphanumeric),
		expires:  now.Add(s.opts.QueueTokenTTL),
		created:  now,
		lastSeen: now,
	}
	s.sessions[sess.id] = sess
	s.sessionsOpened++
	writeJSON(w, http.StatusOK, s.sessionJSONLocked(sess))
}

// sessionLocked finds a live session of the path's scale set, or answers
// 400 for one that expired unpolled and 404 for one it never had or that
// was deleted.
func (s *Server) sessionLocked(w http.ResponseWriter, r *http.Request) *session {
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return nil
	}
	ss := s.scaleSetLocked(w, r, sc)
	if ss == nil {
		return nil
	}
	sess, ok := s.sessions[r.PathValue("sid")]
	if !ok || sess.set != ss || !s.liveLocked(sess) {
		if s.expired[r.PathValue("sid")] == ss {
			// As GitHub answers a session that lapsed unpolled (seen
			// on deleting one, actions-runner-controller#4285).
			writeException(w, http.StatusBadRequest, nsRuntime, "RunnerScaleSetSessionExpiredException",
				"The session identifier %s is not valid.", r.PathValue("sid"))
			return nil
		}
		writeException(w, http.StatusNotFound, nsRuntime, "RunnerScaleSetSessionNotFoundException",
			"The message session %s of runner scale set %d does not exist.", r.PathValue("sid"), ss.id)
		return nil
	}
	return sess
}

// handleRefreshSession gives a session a new message queue token.
func (s *Server) handleRefreshSession(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessionLocked(w, r)
	if sess == nil {
		return
	}
	sess.token = randomString(64, alphanumeric)
	sess.lastSeen = time.Now()
	sess.expires = sess.lastSeen.Add(s.opts.QueueTokenTTL)
	writeJSON(w, http.StatusOK, s.sessionJSONLocked(sess))
}

// handleDeleteSession closes a session.
func (s *Server) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessionLocked(w, r)
	if sess == nil {
		return
	}
	if s.dropSessionCloses {
		// As if the listener was killed before its close arrived.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	sess.deleted = true
	delete(s.sessions, sess.id)
	s.broadcastLocked()
	w.WriteHeader(http.StatusNoContent)
}

// handleAcquireJobs acquires the offered jobs whose runner request ids the
// body lists; it answers the ids it acquired.
func (s *Server) handleAcquireJobs(w http.ResponseWriter, r *http.Request) {
	var ids []int64
	if !readJSON(w, r, &ids) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _ := strconv.Atoi(r.PathValue("id"))
	ss := s.scaleSets[id]
	tok := authToken(r, "bearer")
	authorized := false
	if ss != nil {
		for _, sess := range s.sessions {
			if sess.set == ss && sess.token == tok && time.Now().Before(sess.expires) && s.liveLocked(sess) {
				authorized = true
				sess.lastSeen = time.Now()
			}
		}
		if sc, ok := s.adminTokenScope(tok); ok && ss.scope.is(sc) {
			authorized = true
		}
	}
	if !authorized {
		if ss == nil {
			if _, ok := s.adminTokenScope(tok); ok {
				writeException(w, http.StatusNotFound, nsRuntime, "RunnerScaleSetNotFoundException",
					"The runner scale set with id %s does not exist.", r.PathValue("id"))
				return
			}
		}
		writeException(w, http.StatusUnauthorized, "GitHub.Services.WebApi", "VssUnauthorizedException",
			"TF400813: The user is not authorized to access this resource.")
		return
	}
	acquired := []int64{}
	now := time.Now().UTC()
	for _, rid := range ids {
		for _, j := range s.jobs {
			if j.set == ss && j.state == JobAvailable && j.requestID == rid {
				j.state = JobAssigned
				j.setAssignTime = now
				s.emitLocked(ss, j, jobMessage{MessageType: "JobAssigned"})
				acquired = append(acquired, rid)
			}
		}
	}
	s.settleLocked()
	writeJSON(w, http.StatusOK, map[string]any{"count": len(acquired), "value": acquired})
}

type agentJSON struct {
	ID               int     `json:"id"`
	Name             string  `json:"name"`
	RunnerScaleSetID int     `json:"runnerScaleSetId"`
	Status           string  `json:"status"`
	Enabled          bool    `json:"enabled"`
	Busy             bool    `json:"busy"`
	Ephemeral        bool    `json:"ephemeral"`
	Version          string  `json:"version"`
	OSDescription    string  `json:"osDescription"`
	Labels           []label `json:"labels"`
	CreatedOn        string  `json:"createdOn"`
}

// agentJSONLocked is a runner as the Actions service shows it.
func agentJSONLocked(rn *runner) agentJSON {
	a := agentJSON{
		ID:               rn.id,
		Name:             rn.name,
		RunnerScaleSetID: rn.set.id,
		Status:           "offline",
		Enabled:          true,
		Busy:             rn.job != nil,
		Ephemeral:        true,
		Version:          runnerVersion,
		OSDescription:    "macOS",
		Labels:           []label{},
		CreatedOn:        rn.created.Format(time.RFC3339Nano),
	}
	if rn.online {
		a.Status = "online"
	}
	for _, n := range rn.set.labelNames() {
		a.Labels = append(a.Labels, label{Type: "system", Name: n})
	}
	return a
}

// runnerVersion is the actions runner version the fake runners claim.
const runnerVersion = "2.330.0"

// handleGenerateJITConfig registers an ephemeral runner for a scale set
// and answers its just-in-time configuration.
func (s *Server) handleGenerateJITConfig(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name       string `json:"name"`
		WorkFolder string `json:"workFolder"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	ss := s.scaleSetLocked(w, r, sc)
	if ss == nil {
		return
	}
	if strings.TrimSpace(req.Name) == "" {
		writeException(w, http.StatusBadRequest, "GitHub.Services.WebApi", "ArgumentException", "The runner name is required.")
		return
	}
	for _, rn := range s.runners {
		if rn.set.scope.is(sc) && strings.EqualFold(rn.name, req.Name) {
			writeException(w, http.StatusConflict, nsTask, "AgentExistsException",
				"A runner exists with the same name %s.", req.Name)
			return
		}
	}
	if req.WorkFolder == "" {
		req.WorkFolder = "_work"
	}
	s.nextRunner++
	rn := &runner{
		id:      s.nextRunner,
		name:    req.Name,
		set:     ss,
		secret:  randomString(40, alphanumeric),
		created: time.Now().UTC(),
	}
	s.runners[rn.id] = rn
	s.allRunners = append(s.allRunners, rn)
	g, _ := s.groupLocked(ss.groupID)
	s.settleLocked()
	writeJSON(w, http.StatusOK, map[string]any{
		"runner":           agentJSONLocked(rn),
		"encodedJITConfig": s.encodeJITConfig(rn, g, req.WorkFolder),
	})
}

// jitFake is the part of a just-in-time configuration that RunRunner
// reads.
type jitFake struct {
	ServerURL  string `json:"serverUrl"`
	RunnerID   int    `json:"runnerId"`
	RunnerName string `json:"runnerName"`
	Secret     string `json:"secret"`
}

// jitFakeFile is the file of a just-in-time configuration that holds what
// RunRunner reads.
const jitFakeFile = ".fakegithub"

// encodeJITConfig makes a runner's just-in-time configuration shaped as
// GitHub's: base64 of a JSON object of runner files, each base64 of JSON.
func (s *Server) encodeJITConfig(rn *runner, g runnerGroup, workFolder string) string {
	file := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.StdEncoding.EncodeToString(b)
	}
	files := map[string]string{
		".runner": file(map[string]any{
			"agentId":    rn.id,
			"agentName":  rn.name,
			"poolId":     g.id,
			"poolName":   g.name,
			"serverUrl":  s.url + "/_actions/",
			"gitHubUrl":  s.url + "/" + rn.set.scope.String(),
			"workFolder": workFolder,
			"ephemeral":  true,
		}),
		".credentials": file(map[string]any{
			"scheme": "OAuth",
			"data": map[string]string{
				"clientId":         newUUID(),
				"authorizationUrl": s.url + "/_fake/runners/" + itoa(rn.id) + "/listen",
			},
		}),
		jitFakeFile: file(jitFake{ServerURL: s.url, RunnerID: rn.id, RunnerName: rn.name, Secret: rn.secret}),
	}
	b, _ := json.Marshal(files)
	return base64.StdEncoding.EncodeToString(b)
}

// agentLocked finds a registered runner of the token's scope by the path's
// id, or answers 404 as the Actions service does.
func (s *Server) agentLocked(w http.ResponseWriter, r *http.Request, sc scope) *runner {
	id, err := strconv.Atoi(r.PathValue("id"))
	rn, ok := s.runners[id]
	if err != nil || !ok || !rn.set.scope.is(sc) {
		writeException(w, http.StatusNotFound, nsTask, "AgentNotFoundException",
			"No runner with id %s exists.", r.PathValue("id"))
		return nil
	}
	return rn
}

// handleGetAgent gets a registered runner by id.
func (s *Server) handleGetAgent(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	if rn := s.agentLocked(w, r, sc); rn != nil {
		writeJSON(w, http.StatusOK, agentJSONLocked(rn))
	}
}

// handleListAgents looks registered runners up by name.
func (s *Server) handleListAgents(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	name := r.URL.Query().Get("agentName")
	out := []agentJSON{}
	for _, rn := range s.scopeRunnersLocked(sc) {
		if name == "" || strings.EqualFold(rn.name, name) {
			out = append(out, agentJSONLocked(rn))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(out), "value": out})
}

// handleDeleteAgent removes a runner; a runner running a job cannot be.
func (s *Server) handleDeleteAgent(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.adminScopeLocked(w, r)
	if !ok {
		return
	}
	rn := s.agentLocked(w, r, sc)
	if rn == nil {
		return
	}
	if rn.job != nil {
		writeException(w, http.StatusBadRequest, nsTask, "JobStillRunningException",
			"The runner %s is running job %s and cannot be removed.", rn.name, rn.job.id)
		return
	}
	s.removeRunnerLocked(rn)
	w.WriteHeader(http.StatusNoContent)
}
