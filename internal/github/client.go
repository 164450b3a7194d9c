package github

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/actions/scaleset"
	"github.com/bradleyfalzon/ghinstallation/v2"
	gogithub "github.com/google/go-github/v90/github"
	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
)

// Options tune the client's retries, for tests mostly.
type Options struct {
	// RetryMax is how often a request that failed with a 5xx, a 429 or a
	// broken connection is retried (default 4).
	RetryMax int
	// RetryWaitMax caps the wait between retries (default 30 s).
	RetryWaitMax time.Duration
	// Timeout caps one request, long polls included (default 2 min).
	Timeout time.Duration
	// Transport is the HTTP transport (default: a pooled one).
	Transport *http.Transport
}

// Client talks to GitHub for one runner set.
type Client struct {
	scope   Scope
	creds   Credentials
	actions *scaleset.Client
	rest    *gogithub.Client
	opts    Options

	mu   sync.Mutex
	last *failedResponse
}

// failedResponse is what the last failed answer said beside its body.
type failedResponse struct {
	status int
	reset  *time.Time
	at     time.Time
}

// ErrBusy is the answer to removing a runner that runs a job.
var ErrBusy = errors.New("the runner is running a job")

// New makes a client for scope with creds.
func New(scope Scope, creds Credentials, opts Options) (*Client, error) {
	if opts.RetryMax == 0 {
		opts.RetryMax = 4
	}
	if opts.RetryWaitMax == 0 {
		opts.RetryWaitMax = 30 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	c := &Client{scope: scope, creds: creds, opts: opts}
	info := scaleset.SystemInfo{System: "macvirt", Subsystem: "runner-set"}
	var err error
	if creds.Token != "" {
		c.actions, err = scaleset.NewClientWithPersonalAccessToken(scaleset.NewClientWithPersonalAccessTokenConfig{
			GitHubConfigURL: scope.URL, PersonalAccessToken: creds.Token, SystemInfo: info}, scaleset.WithRetryableHTTPClint(c.retrying()))
	} else {
		c.actions, err = scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
			GitHubConfigURL: scope.URL, SystemInfo: info,
			GitHubAppAuth: scaleset.GitHubAppAuth{ClientID: strconv.FormatInt(creds.AppID, 10), InstallationID: creds.InstallationID,
				PrivateKey: string(creds.PrivateKey)}}, scaleset.WithRetryableHTTPClint(c.retrying()))
	}
	if err != nil {
		return nil, fmt.Errorf("the scale-set client for %s: %w", scope.URL, err)
	}
	rc := c.retrying()
	httpClient := rc.StandardClient()
	if creds.Token == "" {
		itr, err := ghinstallation.New(rc.HTTPClient.Transport, creds.AppID, creds.InstallationID, creds.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", creds.Describe(), err)
		}
		itr.BaseURL = strings.TrimSuffix(scope.APIBase, "/")
		rc.HTTPClient.Transport = itr
		httpClient = rc.StandardClient()
	}
	restOpts := []gogithub.ClientOptionsFunc{gogithub.WithHTTPClient(httpClient)}
	if creds.Token != "" {
		restOpts = append(restOpts, gogithub.WithAuthToken(creds.Token))
	}
	if !scope.Hosted() {
		restOpts = append(restOpts, gogithub.WithEnterpriseURLs(scope.APIBase, scope.APIBase))
	}
	if c.rest, err = gogithub.NewClient(restOpts...); err != nil {
		return nil, fmt.Errorf("the REST client for %s: %w", scope.URL, err)
	}
	return c, nil
}

// retrying is a retrying HTTP client that remembers the last failed answer
// (its status and rate-limit reset), which the libraries' errors omit.
func (c *Client) retrying() *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.RetryMax, rc.RetryWaitMax = c.opts.RetryMax, c.opts.RetryWaitMax
	rc.RetryWaitMin = min(time.Second, c.opts.RetryWaitMax)
	rc.HTTPClient.Timeout = c.opts.Timeout
	if c.opts.Transport != nil {
		rc.HTTPClient.Transport = c.opts.Transport
	}
	rc.Logger = nil
	rc.ResponseLogHook = func(_ retryablehttp.Logger, resp *http.Response) {
		if resp.StatusCode < 400 {
			return
		}
		f := &failedResponse{status: resp.StatusCode, at: time.Now()}
		if resp.Header.Get("X-RateLimit-Remaining") == "0" {
			if sec, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
				t := time.Unix(sec, 0)
				f.reset = &t
			}
		}
		c.mu.Lock()
		c.last = f
		c.mu.Unlock()
	}
	return rc
}

// Credentials are the client's credentials.
func (c *Client) Credentials() Credentials { return c.creds }

// Scope is the client's scope.
func (c *Client) Scope() Scope { return c.scope }

// EnsureScaleSet finds the scale set named name in the runner group, or
// creates it, and gives it labels (its name always among them).
func (c *Client) EnsureScaleSet(ctx context.Context, name, group string, labels []string) (int, error) {
	groupID := 1 // GitHub's default runner group
	if group != "" && !strings.EqualFold(group, scaleset.DefaultRunnerGroup) {
		g, err := c.actions.GetRunnerGroupByName(ctx, group)
		if err != nil {
			return 0, fmt.Errorf("finding runner group %q: %w", group, err)
		}
		groupID = g.ID
	}
	want := []scaleset.Label{{Name: name, Type: "System"}}
	for _, l := range labels {
		if l != name {
			want = append(want, scaleset.Label{Name: l, Type: "System"})
		}
	}
	set, err := c.actions.GetRunnerScaleSet(ctx, groupID, name)
	if err != nil {
		return 0, fmt.Errorf("finding scale set %q: %w", name, err)
	}
	if set == nil {
		set, err = c.actions.CreateRunnerScaleSet(ctx, &scaleset.RunnerScaleSet{Name: name, RunnerGroupID: groupID, Labels: want,
			RunnerSetting: scaleset.RunnerSetting{DisableUpdate: true}})
		if err != nil {
			return 0, fmt.Errorf("creating scale set %q: %w", name, err)
		}
		return set.ID, nil
	}
	if !sameLabels(set.Labels, want) {
		if _, err := c.actions.UpdateRunnerScaleSet(ctx, set.ID, &scaleset.RunnerScaleSet{Name: name, RunnerGroupID: groupID, Labels: want,
			RunnerSetting: scaleset.RunnerSetting{DisableUpdate: true}}); err != nil {
			return 0, fmt.Errorf("updating the labels of scale set %q: %w", name, err)
		}
	}
	return set.ID, nil
}

func sameLabels(have, want []scaleset.Label) bool {
	if len(have) != len(want) {
		return false
	}
	seen := map[string]bool{}
	for _, l := range have {
		seen[l.Name] = true
	}
	for _, l := range want {
		if !seen[l.Name] {
			return false
		}
	}
	return true
}

// DeleteScaleSet removes the scale set from GitHub.
func (c *Client) DeleteScaleSet(ctx context.Context, id int) error {
	if err := c.actions.DeleteRunnerScaleSet(ctx, id); err != nil && !strings.Contains(err.Error(), "404") {
		return fmt.Errorf("deleting scale set %d: %w", id, err)
	}
	return nil
}

// Session opens the scale set's message session as owner. GitHub keeps one
// session per scale set: another one open answers 409 until it expires.
func (c *Client) Session(ctx context.Context, scaleSetID int, owner string) (*scaleset.MessageSessionClient, error) {
	return c.actions.MessageSessionClient(ctx, scaleSetID, owner)
}

// CloseSession deletes the scale set's message session id: one the set
// opened before and an operator that stopped without closing it left
// open, which GitHub would keep, refusing any other, until it expired. The
// scale-set library closes only the session it opened itself, so this
// takes the same road it does: a registration token from the REST API,
// exchanged for the Actions service's address and an admin token. It
// reports whether the session was open; one already gone is no error.
func (c *Client) CloseSession(ctx context.Context, scaleSetID int, id string) (bool, error) {
	sid, err := uuid.Parse(id)
	if err != nil {
		return false, fmt.Errorf("message session id %q: %w", id, err)
	}
	var reg *gogithub.RegistrationToken
	if c.scope.Repo != "" {
		reg, _, err = c.rest.Actions.CreateRegistrationToken(ctx, c.scope.Owner, c.scope.Repo)
	} else {
		reg, _, err = c.rest.Actions.CreateOrganizationRegistrationToken(ctx, c.scope.Owner)
	}
	if err != nil {
		return false, fmt.Errorf("a registration token to close message session %s: %w", id, err)
	}
	body, err := json.Marshal(map[string]string{"url": c.scope.URL, "runner_event": "register"})
	if err != nil {
		return false, err
	}
	var conn struct {
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	hc := c.retrying().StandardClient()
	if err := c.call(ctx, hc, http.MethodPost, c.scope.APIBase+"actions/runner-registration", "RemoteAuth "+reg.GetToken(),
		bytes.NewReader(body), http.StatusOK, &conn); err != nil {
		return false, fmt.Errorf("the Actions service's address to close message session %s: %w", id, err)
	}
	u := fmt.Sprintf("%s/_apis/runtime/runnerscalesets/%d/sessions/%s?api-version=6.0-preview", strings.TrimSuffix(conn.URL, "/"), scaleSetID, sid)
	err = c.call(ctx, hc, http.MethodDelete, u, "Bearer "+conn.Token, nil, http.StatusNoContent, nil)
	if err != nil && c.Explain(err).StatusCode == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// call makes one request and reads its JSON answer into out; an answer
// other than want is an error naming its status as the libraries' do.
func (c *Client) call(ctx context.Context, hc *http.Client, method, url, auth string, body io.Reader, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "macvirt-runner-set")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status=%q: %s", method, req.URL.Path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, req.URL.Path, err)
		}
	}
	return nil
}

// GenerateJIT registers a runner named name with the scale set and returns
// its just-in-time configuration. A runner of that name left by a crash
// is removed first.
func (c *Client) GenerateJIT(ctx context.Context, scaleSetID int, name string) (string, error) {
	setting := &scaleset.RunnerScaleSetJitRunnerSetting{Name: name, WorkFolder: "_work"}
	cfg, err := c.actions.GenerateJitRunnerConfig(ctx, setting, scaleSetID)
	if errors.Is(err, scaleset.RunnerExistsError) {
		if _, err := c.RemoveRunner(ctx, name); err != nil {
			return "", err
		}
		cfg, err = c.actions.GenerateJitRunnerConfig(ctx, setting, scaleSetID)
	}
	if err != nil {
		return "", fmt.Errorf("registering runner %s: %w", name, err)
	}
	return cfg.EncodedJITConfig, nil
}

// RemoveRunner removes the runner named name from GitHub. It reports
// whether it is gone; ErrBusy when it runs a job.
func (c *Client) RemoveRunner(ctx context.Context, name string) (bool, error) {
	ref, err := c.actions.GetRunnerByName(ctx, name)
	if err != nil {
		return false, fmt.Errorf("finding runner %s: %w", name, err)
	}
	if ref == nil {
		return true, nil
	}
	return c.RemoveRunnerByID(ctx, int64(ref.ID), name)
}

// RemoveScaleSetRunner removes a runner whose id is known once the
// scale-set service says it is a runner of scaleSetID: one that is
// another scale set's (a set of the same name in another namespace, say)
// is left alone and reported as not removed.
func (c *Client) RemoveScaleSetRunner(ctx context.Context, scaleSetID int, id int64, name string) (bool, error) {
	ref, err := c.actions.GetRunner(ctx, int(id))
	switch {
	case err != nil && errors.Is(err, scaleset.RunnerNotFoundError), err == nil && ref == nil:
		return true, nil
	case err != nil && notFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("asking the scale-set service for runner %s: %w", name, err)
	case ref.RunnerScaleSetID != scaleSetID:
		return false, nil
	}
	return c.RemoveRunnerByID(ctx, id, name)
}

// SessionGone reports whether err, from polling or refreshing a message
// session, says GitHub no longer has the session, from the error's own
// status (never an earlier answer's): 404 (deleted, or expired as a
// refresh finds it), 410, or 400 (GitHub has answered an expired or
// invalid session so), so that polling it again cannot succeed.
func SessionGone(err error) bool {
	if err == nil {
		return false
	}
	m := statusInError.FindStringSubmatch(err.Error())
	return m != nil && (m[1] == "404" || m[1] == "410" || m[1] == "400")
}

// notFound reports whether err is the scale-set service's 404.
func notFound(err error) bool {
	m := statusInError.FindStringSubmatch(err.Error())
	return m != nil && m[1] == "404"
}

// RemoveRunnerByID removes a runner whose id is known.
func (c *Client) RemoveRunnerByID(ctx context.Context, id int64, name string) (bool, error) {
	err := c.actions.RemoveRunner(ctx, id)
	switch {
	case err == nil, errors.Is(err, scaleset.RunnerNotFoundError):
		return true, nil
	case errors.Is(err, scaleset.JobStillRunningError):
		return false, ErrBusy
	default:
		return false, fmt.Errorf("removing runner %s: %w", name, err)
	}
}

// Runner is a registered runner as GitHub's REST API lists it.
type Runner struct {
	ID     int64
	Name   string
	Online bool
	Busy   bool
}

// ListRunners lists the scope's self-hosted runners that carry label (a
// scale set's runners carry its name) or whose name owns says is the
// set's: a scale set's runners may show no labels in this list (as
// reported against GitHub's own scale-set controller), and a set that read
// only labels would see its idle runners as never online, and no leak.
// Before removing one it did not see labelled, a set asks the scale-set
// service whose runner it is (RemoveScaleSetRunner).
func (c *Client) ListRunners(ctx context.Context, label string, owns func(name string) bool) ([]Runner, error) {
	opts := &gogithub.ListRunnersOptions{ListOptions: gogithub.ListOptions{PerPage: 100}}
	var out []Runner
	for {
		var (
			page *gogithub.Runners
			resp *gogithub.Response
			err  error
		)
		if c.scope.Repo != "" {
			page, resp, err = c.rest.Actions.ListRunners(ctx, c.scope.Owner, c.scope.Repo, opts)
		} else {
			page, resp, err = c.rest.Actions.ListOrganizationRunners(ctx, c.scope.Owner, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("listing the runners of %s: %w", c.scope.URL, err)
		}
		for _, r := range page.Runners {
			if !hasLabel(r, label) && (owns == nil || !owns(r.GetName())) {
				continue
			}
			out = append(out, Runner{ID: r.GetID(), Name: r.GetName(), Online: r.GetStatus() == "online", Busy: r.GetBusy()})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

func hasLabel(r *gogithub.Runner, label string) bool {
	for _, l := range r.Labels {
		if l.GetName() == label {
			return true
		}
	}
	return false
}

// Explanation is an error from GitHub as a runner set shows it.
type Explanation struct {
	StatusCode int
	Message    string
	RateLimit  *time.Time
	// Credentials: GitHub refused the credentials (401).
	Credentials bool
	// Conflict: another message session is open (409).
	Conflict bool
}

var statusInError = regexp.MustCompile(`status="(\d{3})`)

// Explain says err in GitHub's words: the status, which credential a 401
// refused, when a rate limit resets.
func (c *Client) Explain(err error) Explanation {
	e := Explanation{Message: err.Error()}
	var rl *gogithub.RateLimitError
	var er *gogithub.ErrorResponse
	switch {
	case errors.As(err, &rl):
		e.StatusCode = rl.Response.StatusCode
		t := rl.Rate.Reset.Time
		e.RateLimit = &t
	case errors.As(err, &er) && er.Response != nil:
		e.StatusCode = er.Response.StatusCode
	default:
		if m := statusInError.FindStringSubmatch(e.Message); m != nil {
			e.StatusCode, _ = strconv.Atoi(m[1])
		}
	}
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if e.StatusCode == 0 && last != nil && time.Since(last.at) < time.Minute {
		e.StatusCode = last.status
	}
	if e.RateLimit == nil && last != nil && last.reset != nil && last.status == e.StatusCode {
		e.RateLimit = last.reset
	}
	switch {
	case e.StatusCode == http.StatusUnauthorized:
		e.Credentials = true
		e.Message = fmt.Sprintf("GitHub refused %s (401): %s", c.creds.Describe(), e.Message)
	case e.RateLimit != nil:
		e.Message = fmt.Sprintf("GitHub's rate limit for %s is spent until %s: %s", c.creds.Describe(),
			e.RateLimit.UTC().Format(time.RFC3339), e.Message)
	case e.StatusCode == http.StatusConflict && strings.Contains(e.Message, "sessions"):
		e.Conflict = true
		e.Message = "another listener holds the scale set's message session (an operator that stopped without closing it; GitHub lets it expire): " + e.Message
	}
	return e
}
