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

package tart

import (
	"testing"

	"github.com/macvirt/macvirt/internal/hostagent/vz"
)

func TestParsePullLine(t *testing.T) {
	for name, tc := range map[string]struct {
		before  vz.PullProgress
		line    string
		want    vz.PullProgress
		changed bool
	}{
		"the disk's size":             {line: "pulling disk (40.0 GB compressed)...", want: vz.PullProgress{TotalBytes: 40e9}, changed: true},
		"a fraction of a GB":          {line: "pulling disk (17.6 GB compressed)...", want: vz.PullProgress{TotalBytes: 17.6e9}, changed: true},
		"a percentage":                {before: vz.PullProgress{TotalBytes: 40e9}, line: "25%", want: vz.PullProgress{TotalBytes: 40e9, CompletedBytes: 10e9, Percent: 25}, changed: true},
		"all of it":                   {before: vz.PullProgress{TotalBytes: 17.6e9}, line: "100%", want: vz.PullProgress{TotalBytes: 17.6e9, CompletedBytes: 17.6e9, Percent: 100}, changed: true},
		"a terminal's redrawn line":   {before: vz.PullProgress{TotalBytes: 40e9}, line: "\x1b[1A\r\x1b[J50%", want: vz.PullProgress{TotalBytes: 40e9, CompletedBytes: 20e9, Percent: 50}, changed: true},
		"the same percentage again":   {before: vz.PullProgress{TotalBytes: 40e9, CompletedBytes: 10e9, Percent: 25}, line: "25%", want: vz.PullProgress{TotalBytes: 40e9, CompletedBytes: 10e9, Percent: 25}},
		"a percentage before a size":  {line: "25%", want: vz.PullProgress{}},
		"the manifest":                {line: "pulling manifest...", want: vz.PullProgress{}},
		"the NVRAM":                   {before: vz.PullProgress{TotalBytes: 1e9, CompletedBytes: 1e9}, line: "pulling NVRAM...", want: vz.PullProgress{TotalBytes: 1e9, CompletedBytes: 1e9}},
		"a percentage out of range":   {before: vz.PullProgress{TotalBytes: 1e9}, line: "250%", want: vz.PullProgress{TotalBytes: 1e9}},
		"a size that is not a number": {line: "pulling disk (many GB compressed)...", want: vz.PullProgress{}},
	} {
		t.Run(name, func(t *testing.T) {
			p := tc.before
			if changed := parsePullLine(tc.line, &p); changed != tc.changed || p != tc.want {
				t.Fatalf("parsePullLine(%q) = %v, %+v; want %v, %+v", tc.line, changed, p, tc.changed, tc.want)
			}
		})
	}
}
