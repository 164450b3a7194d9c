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

package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// pull pulls an image into the cache unless it is there, as tart's
// VMStorageOCI.pull does: one pull per registry host at a time (tart
// locks the host's cache directory, and says "waiting for lock..."), the
// disk's size printed once, then its percentage at most once a second, a
// line each with CI set and a redrawn line without. The pull takes the
// image's size over the knobs' link speed; SIGINT cancels it (tart
// cancels its task on Ctrl+C) and leaves nothing in the cache.
func (e *env) pull(ref string) error {
	cached := filepath.Join(e.home, "cache", "OCIs", url.PathEscape(ref))
	if _, err := os.Stat(cached); err == nil {
		return nil
	}
	fmt.Println("pulling manifest...")
	host, _, _ := strings.Cut(ref, "/")
	locks := filepath.Join(e.home, "cache", "locks")
	if err := os.MkdirAll(locks, 0o750); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(locks, url.PathEscape(host)), os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: the fake's own cache.
	if err != nil {
		return err
	}
	defer func() { _ = lock.Close() }()
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		fmt.Println("waiting for lock...")
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return err
		}
	}
	if _, err := os.Stat(cached); err == nil {
		fmt.Printf("%s image is already cached! creating a symlink...\n", ref)
		return nil
	}
	size := e.knobs.ImageSizes[ref]
	fmt.Printf("pulling disk (%.1f GB compressed)...\n", float64(size)/1e9)
	interactive := os.Getenv("CI") == ""
	show := func(pct int) {
		if interactive {
			fmt.Printf("\x1b[1A\r\x1b[J%d%%\n", pct)
			return
		}
		fmt.Printf("%d%%\n", pct)
	}
	fmt.Println("0%")
	var took time.Duration
	if e.knobs.PullBytesPerSecond > 0 {
		took = time.Duration(float64(size) / float64(e.knobs.PullBytesPerSecond) * float64(time.Second))
	}
	cancel := make(chan os.Signal, 1)
	signal.Notify(cancel, syscall.SIGINT)
	start, last, shown := time.Now(), time.Now(), 0
	for {
		elapsed := time.Since(start)
		if elapsed >= took {
			break
		}
		select {
		case <-cancel:
			return failf("CancellationError()")
		case <-time.After(min(100*time.Millisecond, took-elapsed)):
		}
		pct := int(100 * time.Since(start) / took)
		if pct != shown && pct < 100 && time.Since(last) >= time.Second {
			show(pct)
			shown, last = pct, time.Now()
		}
	}
	show(100)
	fmt.Println("pulling NVRAM...")
	return os.MkdirAll(cached, 0o750)
}
