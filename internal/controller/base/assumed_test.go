package base

import (
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// assumeAt is a record of value for key, made at t0+after for ttl.
type assumeAt struct {
	key, value string
	after, ttl time.Duration
}

func assumedOf(records ...assumeAt) *Assumed[string, string] {
	a := &Assumed[string, string]{}
	for _, r := range records {
		a.Assume(r.key, r.value, t0.Add(r.after), r.ttl)
	}
	return a
}

func TestAssumedGet(t *testing.T) {
	for name, tc := range map[string]struct {
		records []assumeAt
		forget  string
		at      time.Duration // after t0
		want    string
		wantAt  time.Duration
		ok      bool
	}{
		"nothing recorded":                       {at: 0},
		"recorded, within its time-to-live":      {records: []assumeAt{{"m", "bound", 0, time.Minute}}, at: 59 * time.Second, want: "bound", ok: true},
		"expired at exactly its time-to-live":    {records: []assumeAt{{"m", "bound", 0, time.Minute}}, at: time.Minute},
		"until forgotten: stands a year later":   {records: []assumeAt{{"m", "bound", 0, UntilForgotten}}, at: 365 * 24 * time.Hour, want: "bound", ok: true},
		"a later record replaces value and time": {records: []assumeAt{{"m", "first", 0, time.Minute}, {"m", "second", 50 * time.Second, time.Minute}}, at: 90 * time.Second, want: "second", wantAt: 50 * time.Second, ok: true},
		"forgotten":                              {records: []assumeAt{{"m", "bound", 0, UntilForgotten}}, forget: "m", at: 0},
		"another key is not forgotten":           {records: []assumeAt{{"m", "bound", 0, UntilForgotten}}, forget: "n", at: 0, want: "bound", ok: true},
		"another key's record is not this one's": {records: []assumeAt{{"n", "bound", 0, UntilForgotten}}, at: 0},
	} {
		t.Run(name, func(t *testing.T) {
			a := assumedOf(tc.records...)
			if tc.forget != "" {
				a.Forget(tc.forget)
			}
			got, at, ok := a.Get("m", t0.Add(tc.at))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Get = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
			if ok && !at.Equal(t0.Add(tc.wantAt)) {
				t.Errorf("recorded at %s, want %s", at, t0.Add(tc.wantAt))
			}
		})
	}
}

func TestAssumedLoadOrAssume(t *testing.T) {
	for name, tc := range map[string]struct {
		records    []assumeAt
		at         time.Duration
		wantActual string
		wantLoaded bool
		// wantAfter is the record's value half a minute after the call.
		wantAfter string
	}{
		"none: recorded":                  {at: 0, wantActual: "mine", wantAfter: "mine"},
		"one standing: loaded, unchanged": {records: []assumeAt{{"m", "theirs", 0, 2 * time.Minute}}, at: time.Minute, wantActual: "theirs", wantLoaded: true, wantAfter: "theirs"},
		"one expired: replaced":           {records: []assumeAt{{"m", "theirs", 0, time.Minute}}, at: time.Minute, wantActual: "mine", wantAfter: "mine"},
	} {
		t.Run(name, func(t *testing.T) {
			a := assumedOf(tc.records...)
			actual, loaded := a.LoadOrAssume("m", "mine", t0.Add(tc.at), 2*time.Minute)
			if actual != tc.wantActual || loaded != tc.wantLoaded {
				t.Errorf("LoadOrAssume = %q, %v; want %q, %v", actual, loaded, tc.wantActual, tc.wantLoaded)
			}
			if got, _, _ := a.Get("m", t0.Add(tc.at+30*time.Second)); got != tc.wantAfter {
				t.Errorf("afterwards the record is %q, want %q", got, tc.wantAfter)
			}
		})
	}
}

// Of many workers after one key at once, exactly one records it.
func TestAssumedLoadOrAssumeRecordsOnceAmongConcurrentCallers(t *testing.T) {
	a := &Assumed[string, int]{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, loaded := a.LoadOrAssume("m", i, t0, time.Minute); !loaded {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if winners != 1 {
		t.Errorf("%d callers recorded the key, want 1", winners)
	}
}

func TestAssumedAll(t *testing.T) {
	a := assumedOf(assumeAt{"a", "1", 0, time.Minute}, assumeAt{"b", "2", 0, UntilForgotten}, assumeAt{"c", "3", 30 * time.Second, time.Minute})
	got := map[string]string{}
	for k, v := range a.All(t0.Add(time.Minute)) {
		got[k] = v
		// Forgetting while looping is allowed: All yields a snapshot.
		a.Forget(k)
	}
	if want := map[string]string{"b": "2", "c": "3"}; !maps.Equal(got, want) {
		t.Errorf("All = %v, want %v (the expired record left out)", got, want)
	}
	if n := len(a.items); n != 0 {
		t.Errorf("%d records left, want none: the expired one is dropped, the others were forgotten", n)
	}
	for k := range a.All(t0) {
		t.Errorf("All yielded %q after everything was forgotten", k)
	}
}

// The expired records are swept out once there are many, so a busy
// operator's records do not grow without bound; standing ones stay.
func TestAssumedSweepsExpiredRecordsWhenItGrows(t *testing.T) {
	a := &Assumed[string, string]{}
	for i := range pruneAbove + 1 {
		a.Assume(fmt.Sprint("old-", i), "x", t0, time.Minute)
	}
	a.Assume("kept", "x", t0, UntilForgotten)
	if n := len(a.items); n != pruneAbove+2 {
		t.Fatalf("%d records before any expired, want %d", n, pruneAbove+2)
	}
	a.Assume("new", "x", t0.Add(time.Minute), time.Minute)
	if n := len(a.items); n != 2 {
		t.Errorf("%d records after the sweep, want 2 (the standing one and the new one)", n)
	}
	if _, _, ok := a.Get("kept", t0.Add(time.Hour)); !ok {
		t.Error("the sweep dropped a record that stands until forgotten")
	}
}
