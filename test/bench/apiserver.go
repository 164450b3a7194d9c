package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// serverLoad is what the API server's own metrics say it did: CPU seconds
// of the kube-apiserver process and mutating requests served.
type serverLoad struct {
	cpuSeconds float64
	mutating   float64
	// byResource is mutating requests by "VERB resource[/subresource]".
	byResource map[string]float64
	// reads is the other requests (GET, LIST, WATCH) the same way.
	reads map[string]float64
}

func (l serverLoad) minus(o serverLoad) serverLoad {
	d := serverLoad{cpuSeconds: l.cpuSeconds - o.cpuSeconds, mutating: l.mutating - o.mutating, byResource: map[string]float64{}, reads: map[string]float64{}}
	for k, v := range l.byResource {
		if n := v - o.byResource[k]; n > 0 {
			d.byResource[k] = n
		}
	}
	for k, v := range l.reads {
		if n := v - o.reads[k]; n > 0 {
			d.reads[k] = n
		}
	}
	return d
}

// mutatingVerbs are the apiserver_request_total verbs that write.
var mutatingVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// sampleServer reads the API server's /metrics. Both sides of the bench
// are measured against the same server, so the difference of two samples
// is each side's cost: requests the binder (and its events) caused, and
// the server CPU they took.
func sampleServer(ctx context.Context, cfg *rest.Config) (serverLoad, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return serverLoad{}, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return serverLoad{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return serverLoad{}, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	var l serverLoad
	if f := families["process_cpu_seconds_total"]; f != nil && len(f.GetMetric()) > 0 {
		l.cpuSeconds = f.GetMetric()[0].GetCounter().GetValue()
	}
	l.byResource, l.reads = map[string]float64{}, map[string]float64{}
	if f := families["apiserver_request_total"]; f != nil {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			v := m.GetCounter().GetValue()
			key := labels["verb"] + " " + labels["resource"]
			if sub := labels["subresource"]; sub != "" {
				key += "/" + sub
			}
			if !mutatingVerbs[labels["verb"]] {
				l.reads[key] += v
				continue
			}
			l.mutating += v
			l.byResource[key] += v
		}
	}
	return l, nil
}

// waitIdle waits until the API server is idle: its mutating requests
// (apiserver_request_total) unchanged over quiet. After timeout it says so
// on stderr and goes on: a writer that never stops would be counted in
// what follows, and the figures would show it.
func waitIdle(ctx context.Context, cfg *rest.Config, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	prev, err := sampleServer(ctx, cfg)
	if err != nil {
		return err
	}
	for {
		time.Sleep(quiet)
		cur, err := sampleServer(ctx, cfg)
		if err != nil {
			return err
		}
		if cur.mutating == prev.mutating {
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "bench: the API server still served %.0f writes in the last %s after %s; measuring anyway: %s\n",
				cur.mutating-prev.mutating, quiet, timeout, breakdown(cur.minus(prev).byResource, 1))
			return nil
		}
		prev = cur
	}
}
