package base

import "context"

// Step is one step of a reconcile: it answers one question about the
// object (does it exist, does it match, is it ready), records what it
// found, or failed to do, in the scope S, and says whether the next step
// may run. A step that cannot go on returns proceed false, with the error
// to retry with backoff, or without one when a watch will bring the next
// reconcile.
type Step[S any] func(ctx context.Context, scope S) (proceed bool, err error)

// RunSteps runs steps in order until one fails or says not to proceed, and
// returns that step's error.
func RunSteps[S any](ctx context.Context, scope S, steps ...Step[S]) error {
	for _, step := range steps {
		if proceed, err := step(ctx, scope); err != nil || !proceed {
			return err
		}
	}
	return nil
}
