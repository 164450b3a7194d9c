package guestagent

import (
	"context"
	"time"

	"github.com/macvirt/macvirt/internal/guestprotocol"
)

// V2Retry is how long an agent that found an operator speaking v1 only
// (one from before v2, after a rollback) speaks v1 before it tries v2
// again.
var V2Retry = 10 * time.Minute

// Speaker chooses the protocol of each heartbeat: v2, with the tasks'
// reports, when it has Tasks to run; v1 otherwise, and for V2Retry after an
// operator answered v2 as an unknown endpoint.
type Speaker struct {
	// Tasks runs what a v2 answer hands the agent; nil speaks v1 only.
	Tasks *Tasks
	Logf  func(string, ...any)

	v1Until time.Time
	watch   watcher
}

func newSpeaker(p Platform, logf func(string, ...any)) *Speaker {
	s := &Speaker{Logf: logf}
	if tp, ok := p.(TaskPlatform); ok {
		s.Tasks = &Tasks{Dir: tp.TaskDir(), Host: tp, Logf: logf}
	}
	return s
}

// Changed is signalled when a task started or ended, so the operator hears
// of it with a heartbeat now rather than an interval later; nil for v1.
func (s *Speaker) Changed() <-chan struct{} {
	if s.Tasks == nil {
		return nil
	}
	return s.Tasks.Changed()
}

// Pushed is signalled when the operator's watch says the desired state
// changed: the agent heartbeats now to take it. A Speaker holds the watch
// from its first v2 answer on, until Stop.
func (s *Speaker) Pushed() <-chan struct{} {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	s.watch.init(s.Logf)
	return s.watch.pushed
}

// Stop ends the watch.
func (s *Speaker) Stop() { s.watch.stop() }

// Heartbeat sends one heartbeat and returns the desired state, running the
// tasks a v2 answer hands over.
func (s *Speaker) Heartbeat(ctx context.Context, c *Client, facts Facts) (*guestprotocol.DesiredState, error) {
	if s.Tasks == nil || time.Now().Before(s.v1Until) {
		return c.Heartbeat(ctx, facts)
	}
	s.Tasks.SetBoot(facts.BootTime)
	state, err := c.HeartbeatV2(ctx, facts, s.Tasks.Reports())
	if SpeaksV1(err) {
		s.v1Until = time.Now().Add(V2Retry)
		if s.Logf != nil {
			s.Logf("the operator speaks protocol v1 only, which runs no tasks; speaking v1, and v2 again in %s", V2Retry)
		}
		return c.Heartbeat(ctx, facts)
	}
	if err != nil {
		return nil, err
	}
	s.Tasks.Update(state.Binding, state.Tasks)
	s.watch.heardFrom(ctx, c, state.Revision, s.Logf)
	return &state.DesiredState, nil
}
