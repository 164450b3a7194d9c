package runnerset

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestGiveUpSession(t *testing.T) {
	answer := func(status string) error {
		return fmt.Errorf("getting the next message: %w", fmt.Errorf(`request failed: method="GET" url="https://pipelines.actions.githubusercontent.com/x/_apis/runtime/runnerscalesets/1/sessions/s/messages" status=%q`, status))
	}
	for _, tc := range []struct {
		name    string
		err     error
		failing time.Duration
		giveUp  bool
	}{
		{"an expired session, on its first failed poll", answer("400 Bad Request"), 0, true},
		{"a deleted session, on its first failed poll", answer("404 Not Found"), 0, true},
		{"GitHub failing for a minute", answer("503 Service Unavailable"), time.Minute, false},
		{"GitHub failing for just GitHub's two minutes", answer("503 Service Unavailable"), 2 * time.Minute, false},
		{"GitHub failing past GitHub's two minutes: the session lapsed unpolled", answer("503 Service Unavailable"), 2*time.Minute + time.Second, true},
		{"a broken connection for a minute", errors.New("read tcp: connection reset by peer"), time.Minute, false},
		{"a broken connection for three minutes", errors.New("read tcp: connection reset by peer"), 3 * time.Minute, true},
		{"a refused message queue token for three minutes", answer("401 Unauthorized"), 3 * time.Minute, true},
	} {
		if got := giveUpSession(tc.err, tc.failing); got != tc.giveUp {
			t.Errorf("%s: giveUpSession after %s = %t, want %t", tc.name, tc.failing, got, tc.giveUp)
		}
	}
}
