package fakegithub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

func itoa(i int) string { return strconv.Itoa(i) }

// pathScope is the organisation or repository a REST path names.
func pathScope(r *http.Request) scope {
	if org := r.PathValue("org"); org != "" {
		return scope{owner: org}
	}
	return scope{owner: r.PathValue("owner"), repo: r.PathValue("repo")}
}

// scopeExistsLocked reports whether the organisation or repository exists.
func (s *Server) scopeExistsLocked(sc scope) bool {
	if len(s.opts.Orgs) == 0 && len(s.opts.Repos) == 0 {
		return true
	}
	if slices.ContainsFunc(s.opts.Orgs, func(o string) bool { return strings.EqualFold(o, sc.owner) }) {
		return true
	}
	return sc.repo != "" && slices.ContainsFunc(s.opts.Repos, func(o string) bool { return strings.EqualFold(o, sc.String()) })
}

// restAuthLocked reports whether the request carries a personal access
// token or an unexpired installation token.
func (s *Server) restAuthLocked(r *http.Request) bool {
	tok := bearerToken(r)
	if tok == "" {
		return false
	}
	if t, ok := s.instTokens[tok]; ok {
		return time.Now().Before(t.expires)
	}
	if slices.Contains(s.opts.Tokens, tok) {
		return true
	}
	return len(s.opts.Tokens) == 0 && len(s.opts.Apps) == 0
}

const jwtUndecodable = "A JSON web token could not be decoded"

// verifyAppJWT checks a GitHub App's JSON web token and returns the app's
// id, or GitHub's message for a token it refuses.
func (s *Server) verifyAppJWT(tok string) (int64, string) {
	header, claims, signed, sig, err := jwtParts(tok)
	if err != nil || header["alg"] != "RS256" {
		return 0, jwtUndecodable
	}
	iss := claimString(claims, "iss")
	for _, a := range s.opts.Apps {
		if iss != strconv.FormatInt(a.AppID, 10) && (a.ClientID == "" || iss != a.ClientID) {
			continue
		}
		if a.PublicKey == nil || verifyRS256(signed, sig, a.PublicKey) != nil {
			continue
		}
		now := time.Now().Unix()
		exp, ok := claimInt(claims, "exp")
		if !ok || exp <= now {
			return 0, "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
		}
		if exp > now+10*60+30 {
			return 0, "'Expiration time' claim ('exp') is too far in the future"
		}
		if iat, ok := claimInt(claims, "iat"); !ok || iat > now+60 {
			return 0, "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
		}
		return a.AppID, ""
	}
	return 0, jwtUndecodable
}

// handleAccessToken creates an installation access token for a GitHub App.
func (s *Server) handleAccessToken(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeJSON(w, http.StatusNotFound, notFound)
		return
	}
	appID, msg := s.verifyAppJWT(authToken(r, "bearer"))
	if msg != "" {
		writeJSON(w, http.StatusUnauthorized, githubError{Message: msg, DocumentationURL: "https://docs.github.com/rest", Status: "401"})
		return
	}
	if !slices.ContainsFunc(s.opts.Apps, func(a App) bool { return a.AppID == appID && a.InstallationID == id }) {
		writeJSON(w, http.StatusNotFound, notFound)
		return
	}
	// ghinstallation sends "null" when it has no options; a body may narrow
	// the token to repositories or permissions.
	var req struct {
		Repositories  []string          `json:"repositories"`
		RepositoryIDs []int64           `json:"repository_ids"`
		Permissions   map[string]string `json:"permissions"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if b := strings.TrimSpace(string(body)); b != "" && b != "null" {
		if err := json.Unmarshal(body, &req); err != nil {
			writeJSON(w, http.StatusBadRequest, githubError{Message: "Problems parsing JSON", DocumentationURL: "https://docs.github.com/rest", Status: "400"})
			return
		}
	}
	perms := req.Permissions
	if len(perms) == 0 {
		perms = map[string]string{"actions": "read", "administration": "write", "metadata": "read", "organization_self_hosted_runners": "write"}
	}
	selection := "all"
	if len(req.Repositories) > 0 || len(req.RepositoryIDs) > 0 {
		selection = "selected"
	}
	tok := "ghs_" + randomString(36, alphanumeric)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	s.mu.Lock()
	s.instTokens[tok] = installationToken{installationID: id, expires: expires}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"token":                tok,
		"expires_at":           expires,
		"permissions":          perms,
		"repository_selection": selection,
	})
}

// handleRegistrationToken creates a runner registration token for an
// organisation or a repository.
func (s *Server) handleRegistrationToken(w http.ResponseWriter, r *http.Request) {
	sc := pathScope(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.restAuthLocked(r) {
		writeJSON(w, http.StatusUnauthorized, badCredentials)
		return
	}
	if !s.scopeExistsLocked(sc) {
		writeJSON(w, http.StatusNotFound, notFound)
		return
	}
	tok := randomString(29, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	s.regTokens[tok] = registrationToken{scope: sc, expires: expires}
	writeJSON(w, http.StatusCreated, map[string]any{"token": tok, "expires_at": expires})
}

// handleRunnerRegistration trades a registration token for the Actions
// service's address and an admin token for the token's scope.
func (s *Server) handleRunnerRegistration(w http.ResponseWriter, r *http.Request) {
	var req struct {
		URL         string `json:"url"`
		RunnerEvent string `json:"runner_event"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, githubError{Message: "Problems parsing JSON", DocumentationURL: "https://docs.github.com/rest", Status: "400"})
		return
	}
	s.mu.Lock()
	rt, ok := s.regTokens[authToken(r, "remoteauth")]
	s.mu.Unlock()
	if !ok || time.Now().After(rt.expires) {
		writeJSON(w, http.StatusUnauthorized, badCredentials)
		return
	}
	sc, ok := configScope(req.URL)
	if !ok || !sc.is(rt.scope) {
		writeJSON(w, http.StatusNotFound, notFound)
		return
	}
	now := time.Now()
	tok := signHS256(map[string]any{
		"iss": "fakegithub",
		"aud": s.url + "/_actions",
		"sub": "runner-registration",
		"scp": rt.scope.String(),
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": now.Add(time.Hour).Unix(),
	}, s.signKey)
	writeJSON(w, http.StatusOK, map[string]any{
		"url":          s.url + "/_actions/",
		"token":        tok,
		"token_schema": "OAuthAccessToken",
	})
}

// configScope reads the organisation or repository of a configuration
// address such as https://host/org/repo.
func configScope(raw string) (scope, bool) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return scope{}, false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return scope{owner: parts[0]}, true
	case len(parts) == 2 && parts[0] != "" && parts[1] != "" && !strings.EqualFold(parts[0], "enterprises"):
		return scope{owner: parts[0], repo: parts[1]}, true
	}
	return scope{}, false
}

type restLabel struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

type restRunner struct {
	ID            int64       `json:"id"`
	Name          string      `json:"name"`
	OS            string      `json:"os"`
	Status        string      `json:"status"`
	Busy          bool        `json:"busy"`
	Ephemeral     bool        `json:"ephemeral"`
	RunnerGroupID int64       `json:"runner_group_id"`
	Labels        []restLabel `json:"labels"`
}

// restRunnerLocked is a runner as the REST API shows it.
func (s *Server) restRunnerLocked(r *runner) restRunner {
	out := restRunner{
		ID:            int64(r.id),
		Name:          r.name,
		OS:            "macOS",
		Status:        "offline",
		Busy:          r.job != nil,
		Ephemeral:     true,
		RunnerGroupID: int64(r.set.groupID),
		Labels:        []restLabel{},
	}
	if r.online {
		out.Status = "online"
	}
	if s.unlabelledREST {
		return out
	}
	for _, name := range r.set.labelNames() {
		key := strings.ToLower(name)
		id, ok := s.labelIDs[key]
		if !ok {
			id = int64(len(s.labelIDs) + 1)
			s.labelIDs[key] = id
		}
		out.Labels = append(out.Labels, restLabel{ID: id, Name: name, Type: "custom"})
	}
	return out
}

// scopeRunnersLocked are the registered runners of an organisation's or a
// repository's scale sets, by id.
func (s *Server) scopeRunnersLocked(sc scope) []*runner {
	var out []*runner
	for _, r := range s.runners {
		if r.set.scope.is(sc) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *runner) int { return a.id - b.id })
	return out
}

// handleListRunners lists an organisation's or a repository's runners a
// page at a time, with a Link header as GitHub's.
func (s *Server) handleListRunners(w http.ResponseWriter, r *http.Request) {
	sc := pathScope(r)
	q := r.URL.Query()
	perPage, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || perPage < 1 {
		perPage = 30
	}
	perPage = min(perPage, 100)
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.restAuthLocked(r) {
		writeJSON(w, http.StatusUnauthorized, badCredentials)
		return
	}
	if !s.scopeExistsLocked(sc) {
		writeJSON(w, http.StatusNotFound, notFound)
		return
	}
	all := s.scopeRunnersLocked(sc)
	if name := q.Get("name"); name != "" {
		all = slices.DeleteFunc(all, func(x *runner) bool { return !strings.EqualFold(x.name, name) })
	}
	runners := []restRunner{}
	for i := (page - 1) * perPage; i < len(all) && i < page*perPage; i++ {
		runners = append(runners, s.restRunnerLocked(all[i]))
	}
	last := max(1, (len(all)+perPage-1)/perPage)
	link := func(p int, rel string) string {
		q2 := url.Values{}
		for k, v := range q {
			q2[k] = v
		}
		q2.Set("page", strconv.Itoa(p))
		q2.Set("per_page", strconv.Itoa(perPage))
		return fmt.Sprintf("<%s%s?%s>; rel=%q", s.url, r.URL.Path, q2.Encode(), rel)
	}
	var links []string
	if page > 1 {
		links = append(links, link(page-1, "prev"))
	}
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	writeJSON(w, http.StatusOK, map[string]any{"total_count": len(all), "runners": runners})
}

// restRunnerByIDLocked finds a registered runner of the path's scope, or
// answers 404.
func (s *Server) restRunnerByIDLocked(w http.ResponseWriter, r *http.Request) *runner {
	sc := pathScope(r)
	if !s.restAuthLocked(r) {
		writeJSON(w, http.StatusUnauthorized, badCredentials)
		return nil
	}
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || !s.scopeExistsLocked(sc) {
		writeJSON(w, http.StatusNotFound, notFound)
		return nil
	}
	rn, ok := s.runners[id]
	if !ok || !rn.set.scope.is(sc) {
		writeJSON(w, http.StatusNotFound, notFound)
		return nil
	}
	return rn
}

// handleGetRunner gets one runner of an organisation or a repository.
func (s *Server) handleGetRunner(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rn := s.restRunnerByIDLocked(w, r); rn != nil {
		writeJSON(w, http.StatusOK, s.restRunnerLocked(rn))
	}
}

// handleDeleteRunner removes a runner of an organisation or a repository;
// GitHub refuses while the runner runs a job.
func (s *Server) handleDeleteRunner(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rn := s.restRunnerByIDLocked(w, r)
	if rn == nil {
		return
	}
	if rn.job != nil {
		writeJSON(w, http.StatusUnprocessableEntity, githubError{
			Message:          fmt.Sprintf("Bad request - Runner %q is still running a job", rn.name),
			DocumentationURL: "https://docs.github.com/rest/actions/self-hosted-runners#delete-a-self-hosted-runner-from-an-organization",
			Status:           "422",
		})
		return
	}
	s.removeRunnerLocked(rn)
	w.WriteHeader(http.StatusNoContent)
}

// removeRunnerLocked deregisters an idle runner by an API call; its
// connection, if any, is told and ends.
func (s *Server) removeRunnerLocked(rn *runner) {
	rn.removed = true
	s.deregisterLocked(rn)
	s.settleLocked()
}
