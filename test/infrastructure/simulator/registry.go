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

import "sync"

// Registry stands in for the container registries that DataImportCrons
// poll: it knows, for each image URL, the digest the image's tag currently
// resolves to. A test publishes a new build of an image with SetDigest; the
// simulated poller of each DataImportCron whose template imports that URL
// sees it at its next poll (see dataimportcron.go). A URL the registry does
// not know cannot be polled, like an image that does not exist.
//
// The zero value is an empty registry. A Registry is safe for concurrent
// use.
type Registry struct {
	mu      sync.RWMutex
	digests map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{}
}

// SetDigest makes url resolve to digest from now on. url is a
// DataImportCron template's spec.source.registry.url, compared as written
// ("docker://quay.io/org/macos:15"); digest is what a registry answers,
// "sha256:" and 64 hex digits. CDI names an import after the digest's first
// 12 hex digits and fails on a digest without the "sha256:" prefix, as the
// simulator does.
func (r *Registry) SetDigest(url, digest string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.digests == nil {
		r.digests = map[string]string{}
	}
	r.digests[url] = digest
}

// Digest returns the digest url resolves to; ok is false for a URL the
// registry does not know.
func (r *Registry) Digest(url string) (digest string, ok bool) {
	if r == nil {
		return "", false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	digest, ok = r.digests[url]
	return digest, ok
}
