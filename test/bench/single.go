package main

import (
	"context"
	"fmt"
)

// benchSingle is the latency a user sees: n claims on a warm pool of n
// Ready idle machines (each with its NetworkPolicy) of a quiet cluster, an
// API server of their own, the operator's process running; created one at
// a time, each once the one before is Ready and the API server has been
// quiet for a moment, each timed from its create call to the first watch
// event showing it Ready.
func benchSingle(ctx context.Context, n int) (result, error) {
	env, cfg, c, err := startServer()
	if err != nil {
		return result{}, err
	}
	defer func() { _ = env.Stop() }()
	pool, err := makeWarmPool(ctx, c, n)
	if err != nil {
		return result{}, err
	}
	op, err := startOperatorProcess(env)
	if err != nil {
		return result{}, err
	}
	defer op.stop()
	return measure(ctx, cfg, c, side{label: "single", n: n, build: pool.claim, watches: claimWatches(), binder: op, oneAtATime: true})
}

func reportSingle(r result) {
	bound, ready := rowOf(r, false), rowOf(r, true)
	fmt.Printf("\none claim at a time on a warm pool of a quiet cluster: %d claims over %d Ready idle machines, each created once the one "+
		"before was Ready and the API server had no write for 250 ms:\n", r.n, r.n)
	fmt.Printf("  to Ready: p50 %.0f ms (target < 150 ms: %s), p99 %.0f ms (target < 500 ms: %s); to the machine's claimRef: p50 %.0f ms, p99 %.0f ms\n",
		ready.p50, verdict(ready.p50 < 150), ready.p99, verdict(ready.p99 < 500), bound.p50, bound.p99)
	fmt.Printf("  per claim: mutating requests on its path to Ready %s, the create included; the API server's mutating requests %.2f "+
		"(%s), what follows Ready included; the operator's process CPU %.2f ms\n",
		num(ready.path, 2), ready.mutating, breakdown(r.server.byResource, r.n), ready.binderMs)
}
