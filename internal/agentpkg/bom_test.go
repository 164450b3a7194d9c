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
	"bytes"
	"os"
	"slices"
	"testing"
)

func TestBomListsEveryPayloadPathAsThePayloadHasIt(t *testing.T) {
	o := testOptions()
	x := read(t, build(t, o))
	bom, err := readBom(x.files["macvirt-agent.pkg/Bom"])
	if err != nil {
		t.Fatalf("reading the Bom: %v", err)
	}
	if !slices.Equal(bom.vars, []string{"BomInfo", "Paths", "HLIndex", "VIndex", "Size64"}) {
		t.Errorf("Bom variables = %v", bom.vars)
	}
	entries := payload(t, x, "Payload")
	if bom.numberOfPaths != int64(len(entries))+1 || len(bom.paths) != len(entries) {
		t.Errorf("Bom has %d paths (BomInfo says %d+1), the payload %d", len(bom.paths), bom.numberOfPaths-1, len(entries))
	}
	for _, e := range entries {
		p, ok := bom.paths[e.name]
		if !ok {
			t.Errorf("the Bom does not list %s", e.name)
			continue
		}
		want := bomPath{typ: 2, mode: e.mode, mtime: o.ModTime.Unix()}
		if e.mode&0o100000 != 0 {
			want.typ, want.size, want.sum = 1, int64(len(e.data)), posixCksum(e.data)
		}
		if p != want {
			t.Errorf("Bom has %s as %+v, the payload as %+v", e.name, p, want)
		}
	}
}

// TestBomIsWhatMkbomWrites compares the Bom with bomutils' own: the
// payload of testOptions extracted, every time stamp set to ModTime, then
// `ls4mkbom -u 0 -g 0 root > list; mkbom -i list testdata/mkbom.bom`.
func TestBomIsWhatMkbomWrites(t *testing.T) {
	want, err := os.ReadFile("testdata/mkbom.bom")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, build(t, testOptions())).files["macvirt-agent.pkg/Bom"]; !bytes.Equal(got, want) {
		t.Errorf("the Bom (%d bytes) differs from mkbom's (%d bytes) from byte %d", len(got), len(want), firstDifference(got, want))
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestCksumIsPOSIXCksum(t *testing.T) {
	// `printf 123456789 | cksum` prints 930766865; an empty input 4294967295.
	for in, want := range map[string]int64{"123456789": 930766865, "": 4294967295} {
		if got := cksum([]byte(in)); int64(got) != want || posixCksum([]byte(in)) != want {
			t.Errorf("cksum(%q) = %d (test's: %d), want %d", in, got, posixCksum([]byte(in)), want)
		}
	}
}
