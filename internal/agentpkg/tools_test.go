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

package agentpkg

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Archive tools other than the tests' readers, where the machine has them.
// Without them these tests skip: the package is then checked by the tests'
// own readers only.

var wantArchive = []string{
	"Distribution",
	"macvirt-agent.pkg",
	"macvirt-agent.pkg/Bom",
	"macvirt-agent.pkg/PackageInfo",
	"macvirt-agent.pkg/Payload",
	"macvirt-agent.pkg/Scripts",
}

func lines(out []byte) []string {
	var l []string
	for _, s := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		l = append(l, strings.TrimSuffix(s, "/"))
	}
	slices.Sort(l)
	return l
}

func TestXarListsThePackage(t *testing.T) {
	xar, err := exec.LookPath("xar")
	if err != nil {
		t.Skip("SKIPPED, not passed: no xar on PATH to list the package with")
	}
	// xar checks the TOC's checksum when it opens the archive.
	out, err := exec.Command(xar, "-tf", writePackage(t)).Output() //nolint:gosec // the xar on PATH.
	if err != nil {
		t.Fatalf("xar -tf: %v", err)
	}
	if got := lines(out); !slices.Equal(got, wantArchive) {
		t.Errorf("xar -tf lists %q, want %q", got, wantArchive)
	}
}

func TestBsdtarReadsThePackageAndItsPayload(t *testing.T) {
	bsdtar, err := exec.LookPath("bsdtar")
	if err != nil {
		if os.Getenv("CI") != "" {
			// .ci/run installs libarchive-tools: in CI a missing bsdtar is a
			// hole, not a skip.
			t.Fatal("no bsdtar on PATH: install libarchive-tools")
		}
		t.Skip("SKIPPED, not passed: no bsdtar (libarchive) on PATH to read the package with")
	}
	pkg := writePackage(t)
	out, err := exec.Command(bsdtar, "-tf", pkg).Output() //nolint:gosec // the bsdtar on PATH.
	if err != nil {
		t.Fatalf("bsdtar -tf: %v", err)
	}
	if got := lines(out); !slices.Equal(got, wantArchive) {
		t.Errorf("bsdtar -tf lists %q, want %q", got, wantArchive)
	}
	// libarchive checks each file's checksums as it extracts it.
	list := exec.Command(bsdtar, "-tvf", "-")                                 //nolint:gosec // the bsdtar on PATH.
	extract := exec.Command(bsdtar, "-xOf", pkg, "macvirt-agent.pkg/Payload") //nolint:gosec // the bsdtar on PATH.
	if list.Stdin, err = extract.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := extract.Start(); err != nil {
		t.Fatal(err)
	}
	out, err = list.Output()
	if waitErr := extract.Wait(); waitErr != nil || err != nil {
		t.Fatalf("bsdtar extracting the Payload: %v; listing it: %v", waitErr, err)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || f[2] != "0" || f[3] != "0" {
			t.Errorf("payload entry %q is not owned by 0:0", l)
			continue
		}
		names = append(names, f[0]+" "+f[len(f)-1])
	}
	want := []string{
		"drwxr-xr-x .",
		"drwxr-xr-x ./Library",
		"drwxr-xr-x ./Library/LaunchDaemons",
		"-rw-r--r-- ./Library/LaunchDaemons/io.macvirt.agent.plist",
		"drwxr-xr-x ./usr",
		"drwxr-xr-x ./usr/local",
		"drwxr-xr-x ./usr/local/libexec",
		"-rwxr-xr-x ./usr/local/libexec/macvirt-agent",
	}
	if !slices.Equal(names, want) {
		t.Errorf("bsdtar lists the Payload as\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
