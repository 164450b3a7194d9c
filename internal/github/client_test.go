package github_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/internal/github"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// A scale set's runners may show no labels in GitHub's REST list: a set
// still finds its own there by name, and removes one only once the
// scale-set service says it is its scale set's.
func TestRunnersListedWithoutLabelsAreFoundByNameAndRemovedOnlyIfTheScaleSetsOwn(t *testing.T) {
	srv := fakegithub.New(fakegithub.Options{Tokens: []string{"pat"}, PollWait: 100 * time.Millisecond})
	defer srv.Close()
	srv.UnlabelRESTRunners(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scope, err := github.ParseScope(srv.URL() + "/acme")
	if err != nil {
		t.Fatal(err)
	}
	c, err := github.New(scope, github.Credentials{Token: "pat"}, github.Options{RetryMax: 1, RetryWaitMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := c.EnsureScaleSet(ctx, "ios", "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A set of the same name in another namespace registers with a scale
	// set of its own (another scale-set name), runners named as ours are.
	theirs, err := c.EnsureScaleSet(ctx, "ios-team-b", "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, name := range map[int]string{ours: "ios-aaaaa", theirs: "ios-bbbbb"} {
		if _, err := c.GenerateJIT(ctx, id, name); err != nil {
			t.Fatal(err)
		}
	}
	owns := func(name string) bool { return runnercore.OwnsName("ios", name) }
	listed, err := c.ListRunners(ctx, "ios", owns)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, r := range listed {
		ids[r.Name] = r.ID
	}
	if _, ok := ids["ios-aaaaa"]; !ok {
		t.Fatalf("listed %v: the set's own runner, unlabelled, is not found", listed)
	}
	if gone, err := c.RemoveScaleSetRunner(ctx, ours, ids["ios-bbbbb"], "ios-bbbbb"); err != nil || gone {
		t.Fatalf("removing another scale set's runner: gone %v, %v; want it left alone", gone, err)
	}
	if gone, err := c.RemoveScaleSetRunner(ctx, ours, ids["ios-aaaaa"], "ios-aaaaa"); err != nil || !gone {
		t.Fatalf("removing the set's own runner: gone %v, %v", gone, err)
	}
	after, err := c.ListRunners(ctx, "ios", owns)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, r := range after {
		names = append(names, r.Name)
	}
	if slices.Contains(names, "ios-aaaaa") || !slices.Contains(names, "ios-bbbbb") {
		t.Fatalf("after: %v, want only the other scale set's runner", names)
	}
}

// A poll or refresh is given up only when GitHub's own answer says the
// session is no more; a refused token, a conflict, a server error or a
// broken connection are tried again.
func TestSessionGone(t *testing.T) {
	answer := func(status string) error {
		return fmt.Errorf("getting the next message: %w", fmt.Errorf(`request failed: method="GET" url="https://pipelines.actions.githubusercontent.com/x/_apis/runtime/runnerscalesets/1/sessions/s/messages" status=%q`, status))
	}
	for _, tc := range []struct {
		name string
		err  error
		gone bool
	}{
		{"no error", nil, false},
		{"an expired session (400, RunnerScaleSetSessionExpiredException)", answer("400 Bad Request"), true},
		{"a deleted session", answer("404 Not Found"), true},
		{"gone", answer("410 Gone"), true},
		{"an expired message queue token", answer("401 Unauthorized"), false},
		{"a session held elsewhere", answer("409 Conflict"), false},
		{"GitHub failing", answer("503 Service Unavailable"), false},
		{"a broken connection", errors.New("getting the next message: read tcp: connection reset by peer"), false},
	} {
		if got := github.SessionGone(tc.err); got != tc.gone {
			t.Errorf("%s: SessionGone(%v) = %t, want %t", tc.name, tc.err, got, tc.gone)
		}
	}
}
