package claim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestRetainLedgerCountsBindsTheCacheHasNotShownYet(t *testing.T) {
	var l retainLedger
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		record []types.UID
		cached []types.UID
		at     time.Duration
		want   int
	}{
		{name: "nothing bound", want: 0},
		{name: "the cache alone", cached: []types.UID{"a", "b"}, want: 2},
		{name: "a bind the cache lags", record: []types.UID{"c"}, cached: []types.UID{"a"}, want: 2},
		{name: "a bind the cache shows is counted once", cached: []types.UID{"a", "c"}, want: 2},
		{name: "once shown, a machine the cache drops (deleted) no longer counts", cached: []types.UID{"a"}, want: 1},
		{name: "a record expires after the reservation TTL", record: []types.UID{"d"}, at: reservationTTL, cached: []types.UID{"a"}, want: 1},
	} {
		for _, uid := range tc.record {
			l.record("team/mac", uid, now)
		}
		if got := l.count("team/mac", tc.cached, now.Add(tc.at)); got != tc.want {
			t.Errorf("%s: count = %d, want %d", tc.name, got, tc.want)
		}
		if got := l.count("other/mac", nil, now); got != 0 {
			t.Errorf("%s: another namespace counts %d, want 0", tc.name, got)
		}
	}
}

func TestAReservationSaysWhetherAMachineIsFreeBeingBoundOrWon(t *testing.T) {
	key := types.UID("uid-m")
	now := time.Unix(1000, 0)
	for name, tc := range map[string]struct {
		before func(r *reservations)
		at     time.Duration
		want   int
	}{
		"free":                               {want: reserved},
		"another worker is binding it":       {before: func(r *reservations) { r.reserve(key, now) }, want: beingBound},
		"bound by this process":              {before: func(r *reservations) { r.reserve(key, now); r.won(key, now) }, want: alreadyWon},
		"given back after a lost attempt":    {before: func(r *reservations) { r.reserve(key, now); r.release(key) }, want: reserved},
		"a won machine after the TTL":        {before: func(r *reservations) { r.won(key, now) }, at: reservationTTL, want: reserved},
		"another machine's reservation only": {before: func(r *reservations) { r.reserve("uid-n", now) }, want: reserved},
		"a machine made again under a won one's name is another": {before: func(r *reservations) {
			r.reserve("uid-m-before", now)
			r.won("uid-m-before", now)
		}, want: reserved},
	} {
		t.Run(name, func(t *testing.T) {
			var r reservations
			if tc.before != nil {
				tc.before(&r)
			}
			if got := r.reserve(key, now.Add(tc.at)); got != tc.want {
				t.Errorf("reserve = %d, want %d", got, tc.want)
			}
		})
	}
}
