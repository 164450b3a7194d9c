package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// profileDir is where CPU profiles go; set by -profile-dir, none when empty.
var profileDir string

// profileChunk is the seconds of each API server profile: the server
// profiles for a fixed time, so the bench asks for one chunk after another
// until the side is done (`go tool pprof` merges the files it is given).
const profileChunk = 2

// startProfiles profiles the API server while a side is measured, into
// profileDir as <label>-apiserver-<k>.pprof; stop ends it, after the
// chunk in flight. The operator's process profiles itself over the same
// window, into <label>-operator.pprof (operatorMain).
func startProfiles(ctx context.Context, cfg *rest.Config, label string) (stop func(), err error) {
	if profileDir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(profileDir, 0o750); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := 0; !done.Load(); k++ {
			raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", fmt.Sprint(profileChunk)).DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(filepath.Join(profileDir, fmt.Sprintf("%s-apiserver-%03d.pprof", label, k)), raw, 0o600)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench: profiling the API server:", err)
				return
			}
		}
	}()
	return func() {
		done.Store(true)
		wg.Wait()
	}, nil
}
