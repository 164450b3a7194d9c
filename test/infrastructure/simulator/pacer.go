/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// pacer times the simulated steps. For each object it remembers the state
// the object was last seen in and since when, so that a step fires once the
// object has stayed in its state for the step's duration, however many
// reconciles happen meanwhile. Object timestamps cannot serve: they are
// truncated to whole seconds. After a restart the clock of the current step
// starts again, which only delays it.
//
// With jitter, each step's duration is drawn once, when the object enters
// the state, and kept for as long as it stays there.
type pacer struct {
	mu     sync.Mutex
	marks  map[string]mark
	now    func() time.Time
	jitter *jitter // nil: exact durations
}

type mark struct {
	uid   types.UID
	state string
	since time.Time
	d     time.Duration // the step's duration, jitter included
}

func newPacer(j *jitter) *pacer {
	return &pacer{marks: map[string]mark{}, now: time.Now, jitter: j}
}

// wait returns how long the object identified by key and uid must still stay
// in state before its next step, starting the clock when the object is first
// seen in that state.
func (p *pacer) wait(key string, uid types.UID, state string, d time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	m, ok := p.marks[key]
	if !ok || m.uid != uid || m.state != state {
		d = p.jitter.spread(d)
		p.marks[key] = mark{uid: uid, state: state, since: now, d: d}
		return d
	}
	if left := m.since.Add(m.d).Sub(now); left > 0 {
		return left
	}
	return 0
}

// forget drops the clock of an object that is gone or done.
func (p *pacer) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.marks, key)
}

// pacerKey identifies an object of a kind in the pacer.
func pacerKey(kind string, name types.NamespacedName) string {
	return kind + "/" + name.String()
}
