// Package buildkite is a Buildkite queue's side for macvirt: a custom stack
// on Buildkite's Stacks API (Buildkite's own client, authenticated with a
// cluster agent token) that lists the queue's scheduled jobs, reserves them,
// issues each a short-lived job acquisition token for the agent on its Mac,
// reads their states and fails those it could not start; and explains
// Buildkite's errors in words a status can carry.
package buildkite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/buildkite/stacksapi"
)

// DefaultEndpoint is Buildkite's agent API, where the Stacks API lives.
const DefaultEndpoint = "https://agent.buildkite.com/v3/"

// Client talks to one queue as one stack.
type Client struct {
	api      *stacksapi.Client
	http     *http.Client
	endpoint *url.URL
	token    string
	// Stack is the stack's key; Queue the cluster queue's.
	Stack, Queue string
}

// New is a client for the stack named stack on queue, at endpoint (the
// agent API; empty for Buildkite's), with a cluster agent token.
func New(endpoint, token, stack, queue string, hc *http.Client) (*Client, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(strings.TrimSuffix(endpoint, "/") + "/")
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http(s) URL", endpoint)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	api, err := stacksapi.NewClient(token, stacksapi.WithBaseURL(u), stacksapi.WithHTTPClient(hc),
		stacksapi.PrependToUserAgent("macvirt"))
	if err != nil {
		return nil, err
	}
	return &Client{api: api, http: hc, endpoint: u, token: token, Stack: stack, Queue: queue}, nil
}

// Register registers (or updates) the stack on the queue.
func (c *Client) Register(ctx context.Context, metadata map[string]string) error {
	if metadata == nil {
		metadata = map[string]string{}
	}
	_, _, err := c.api.RegisterStack(ctx, stacksapi.RegisterStackRequest{Key: c.Stack, Type: stacksapi.StackTypeCustom,
		QueueKey: c.Queue, Metadata: metadata}, stacksapi.WithNoRetry())
	return err
}

// Deregister removes the stack from the queue.
func (c *Client) Deregister(ctx context.Context) error {
	_, err := c.api.DeregisterStack(ctx, c.Stack, stacksapi.WithNoRetry())
	return err
}

// Queue is what a poll of the queue saw.
type Queue struct {
	// Jobs are the scheduled jobs no stack holds reserved, highest
	// priority first.
	Jobs []stacksapi.ScheduledJob
	// Paused: the cluster queue is paused in Buildkite; a stack starts no
	// job of it.
	Paused bool
}

// Scheduled reads the queue's scheduled jobs, up to limit.
func (c *Client) Scheduled(ctx context.Context, limit int) (Queue, error) {
	var q Queue
	cursor := ""
	for len(q.Jobs) < limit {
		page, _, err := c.api.ListScheduledJobs(ctx, stacksapi.ListScheduledJobsRequest{StackKey: c.Stack, ClusterQueueKey: c.Queue,
			PageSize: min(limit-len(q.Jobs), 1000), StartCursor: cursor}, stacksapi.WithNoRetry())
		if err != nil {
			return Queue{}, err
		}
		q.Jobs = append(q.Jobs, page.Jobs...)
		q.Paused = q.Paused || page.ClusterQueue.Paused
		if !page.PageInfo.HasNextPage || page.PageInfo.EndCursor == "" {
			break
		}
		cursor = page.PageInfo.EndCursor
	}
	q.Jobs = q.Jobs[:min(len(q.Jobs), limit)]
	return q, nil
}

// Reserve reserves jobs for expiry; it returns those reserved.
func (c *Client) Reserve(ctx context.Context, ids []string, expiry time.Duration) ([]string, error) {
	resp, _, err := c.api.BatchReserveJobs(ctx, stacksapi.BatchReserveJobsRequest{StackKey: c.Stack, JobUUIDs: ids,
		ReservationExpirySeconds: int(expiry.Seconds())}, stacksapi.WithNoRetry())
	if err != nil {
		return nil, err
	}
	return resp.Reserved, nil
}

// States are the jobs' states, by id (Buildkite's words: scheduled,
// running, finished, canceled…); a job Buildkite does not know is absent.
func (c *Client) States(ctx context.Context, ids []string) (map[string]string, error) {
	resp, _, err := c.api.GetJobStates(ctx, stacksapi.GetJobStatesRequest{StackKey: c.Stack, JobUUIDs: ids}, stacksapi.WithNoRetry())
	if err != nil {
		return nil, err
	}
	return resp.States, nil
}

// Fail finishes a reserved job the stack could not start, with detail
// shown on the job in Buildkite. Buildkite refuses (422) a job that is no
// longer reserved by the stack: taken by its agent, or its reservation
// over.
func (c *Client) Fail(ctx context.Context, id, detail string) error {
	_, err := c.api.FinishJob(ctx, stacksapi.FinishJobRequest{StackKey: c.Stack, JobUUID: id, ExitStatus: -1, Detail: detail},
		stacksapi.WithNoRetry())
	return err
}

// Token is a job acquisition token: it lets one agent register and
// acquire one reserved job until it expires.
type Token struct {
	Job     string    `json:"job_uuid"`
	Value   string    `json:"job_acquisition_token"`
	Expires time.Time `json:"expires_at"`
}

// ErrNotIssued is Issue's answer for a job Buildkite gave no token for
// (its reservation ended, it was cancelled or taken).
var ErrNotIssued = errors.New("buildkite issued no job acquisition token for the job")

// Issue asks for a job acquisition token for a job the stack holds
// reserved, living lifetime (1 s to an hour; Buildkite also ends it with
// the reservation). The Stacks API client has no call for it yet, so the
// request is made here, as Buildkite documents it.
func (c *Client) Issue(ctx context.Context, job string, lifetime time.Duration) (Token, error) {
	body, err := json.Marshal(map[string]any{"job_uuids": []string{job}, "token_lifetime_seconds": int(lifetime.Seconds())})
	if err != nil {
		return Token{}, err
	}
	u := c.endpoint.JoinPath("stacks", c.Stack, "job-acquisition-tokens")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Token{}, err
	}
	req.Header.Set("Authorization", "Token "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return Token{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Token{}, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &stacksapi.ErrorResponse{Response: resp, RawBody: raw}
		_ = json.Unmarshal(raw, e)
		return Token{}, e
	}
	var out struct {
		Tokens []Token `json:"job_acquisition_tokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return Token{}, fmt.Errorf("decoding Buildkite's job acquisition tokens: %w", err)
	}
	for _, t := range out.Tokens {
		if t.Job == job && t.Value != "" {
			return t, nil
		}
	}
	return Token{}, ErrNotIssued
}

// Refused reports whether err is Buildkite refusing the request itself
// (a 4xx answer other than 401, 403 and 429), rather than failing.
func Refused(err error) bool {
	var e *stacksapi.ErrorResponse
	if !errors.As(err, &e) || e.Response == nil {
		return false
	}
	c := e.Response.StatusCode
	return c >= 400 && c < 500 && c != http.StatusUnauthorized && c != http.StatusForbidden && c != http.StatusTooManyRequests
}

// Explanation is an error Buildkite answered, in words a status carries.
type Explanation struct {
	StatusCode int
	// Credentials: Buildkite refused the token (401/403).
	Credentials bool
	Message     string
	// RateLimitReset is how long after its answer Buildkite's rate limit
	// resets, when a rate limit was the cause and Buildkite said (0
	// otherwise).
	RateLimitReset time.Duration
}

// Explain words err; secret names where the token is kept.
func Explain(err error, secret string) Explanation {
	var e *stacksapi.ErrorResponse
	if !errors.As(err, &e) || e.Response == nil {
		return Explanation{Message: "Buildkite could not be reached: " + err.Error()}
	}
	code := e.Response.StatusCode
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(code)
	}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return Explanation{StatusCode: code, Credentials: true, Message: fmt.Sprintf(
			"Buildkite refused the agent token in %s (%d): %s; give a cluster agent token of the queue's cluster", secret, code, msg)}
	case http.StatusTooManyRequests:
		return Explanation{StatusCode: code, Message: fmt.Sprintf("Buildkite's rate limit is spent (%d): %s", code, msg),
			RateLimitReset: rateLimitReset(e.Response.Header)}
	}
	return Explanation{StatusCode: code, Message: fmt.Sprintf("Buildkite answered %d: %s", code, msg)}
}

// rateLimitReset is how long until a rate limit resets, as an answer's
// headers say it in seconds: RateLimit-Reset, as Buildkite's APIs send it,
// or else Retry-After. 0 when neither says.
func rateLimitReset(h http.Header) time.Duration {
	for _, name := range []string{"RateLimit-Reset", "Retry-After"} {
		if n, err := strconv.Atoi(strings.TrimSpace(h.Get(name))); err == nil && n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 0
}
