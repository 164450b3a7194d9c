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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// known says whether the fake registry has ref.
func (e *env) known(ref string) error {
	for _, i := range e.knobs.Images {
		if i == ref {
			return nil
		}
	}
	// tart's Registry.pullManifest throws RegistryError on a status that is
	// not 200, and Root.swift hands it to ArgumentParser's exit(withError:),
	// which prints "Error: " and the enum case as it is, with the
	// registry's body.
	_, _, reference := remoteName(ref)
	return failf(`Error: UnexpectedHTTPStatusCode(when: "pulling manifest", code: 404, details: "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"manifest unknown\",\"detail\":\"%s\"}]}")`, reference)
}

// remoteName splits ref as tart's RemoteName: the registry host, the
// namespace, and a tag (latest when none) or a digest.
func remoteName(ref string) (host, namespace, reference string) {
	host, rest, _ := strings.Cut(ref, "/")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return host, rest[:i], rest[i+1:]
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 && !strings.Contains(rest[i:], "/") {
		return host, rest[:i], rest[i+1:]
	}
	return host, rest, "latest"
}

// ociDir is where tart caches a repository: OCIs/<host, ":" encoded>/<namespace>.
func (e *env) ociDir(host, namespace string) string {
	return filepath.Join(e.home, "cache", "OCIs", strings.ReplaceAll(host, ":", "%3A"), filepath.FromSlash(namespace))
}

// digestOf is the digest the fake registry's manifest of ref has now
// (the Digests knob re-pushes a tag).
func (e *env) digestOf(ref string) string {
	if d := e.knobs.Digests[ref]; d != "" {
		return d
	}
	sum := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// cachedTag says whether tart has ref cached under its own name.
func (e *env) cachedTag(ref string) bool {
	host, ns, reference := remoteName(ref)
	_, err := os.Stat(filepath.Join(e.ociDir(host, ns), reference))
	return err == nil
}

// pull pulls an image into the cache as tart's VMStorageOCI.pull does: the
// manifest's digest first, nothing more when the tag is linked to it
// already; else one pull per registry host at a time (tart locks the
// host's cache directory, and says "waiting for lock..."), the disk's size
// printed once, then its percentage at most once a second, a line each
// with CI set and a redrawn line without; the digest's directory, then
// the tag linked to it. The pull takes the image's size over the knobs'
// link speed; SIGINT cancels it (tart cancels its task on Ctrl+C) and
// leaves nothing in the cache.
func (e *env) pull(ref string) error {
	fmt.Println("pulling manifest...")
	host, ns, reference := remoteName(ref)
	dir := e.ociDir(host, ns)
	digest := e.digestOf(ref)
	tag, digestDir := filepath.Join(dir, reference), filepath.Join(dir, digest)
	if target, err := os.Readlink(tag); err == nil && target == digestDir {
		if _, err := os.Stat(digestDir); err == nil {
			fmt.Printf("%s/%s@%s image is already cached and linked!\n", host, ns, digest)
			return nil
		}
	}
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
	if _, err := os.Stat(digestDir); err == nil {
		fmt.Printf("%s/%s@%s image is already cached! creating a symlink...\n", host, ns, digest)
		return e.link(tag, digestDir)
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
	if err := os.MkdirAll(digestDir, 0o750); err != nil {
		return err
	}
	return e.link(tag, digestDir)
}

// link points the tag at the digest's directory, over an older one.
func (e *env) link(tag, digestDir string) error {
	_ = os.Remove(tag)
	return os.Symlink(digestDir, tag)
}
