package runnerset

import (
	"errors"
	"testing"
	"time"
)

// What ends a session at once is github.SessionGone's (TestSessionGone);
// here, how that meets the time the polls have failed.
func TestGiveUpSession(t *testing.T) {
	gone := errors.New(`getting the next message: request failed: status="400 Bad Request"`)
	failing := errors.New(`getting the next message: request failed: status="503 Service Unavailable"`)
	for _, tc := range []struct {
		name   string
		err    error
		failed time.Duration
		want   bool
	}{
		{"a session GitHub no longer has, on its first failed poll", gone, 0, true},
		{"GitHub failing for a minute", failing, time.Minute, false},
		{"GitHub failing for just GitHub's two minutes", failing, 2 * time.Minute, false},
		{"GitHub failing past GitHub's two minutes: the session lapsed unpolled", failing, 2*time.Minute + time.Second, true},
		{"a broken connection for three minutes", errors.New("read tcp: connection reset by peer"), 3 * time.Minute, true},
	} {
		if got := giveUpSession(tc.err, tc.failed); got != tc.want {
			t.Errorf("%s: giveUpSession after %s = %t, want %t", tc.name, tc.failed, got, tc.want)
		}
	}
}
