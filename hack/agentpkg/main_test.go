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
	"encoding/binary"
	"os"
	"runtime"
	"testing"
	"time"
)

// machOHeader is the 64-bit Mach-O header of a file of type filetype for
// x86_64, with no load commands.
func machOHeader(filetype uint32) []byte {
	var b []byte
	for _, v := range []uint32{0xfeedfacf, 0x01000007, 3, filetype, 0, 0, 0, 0} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestAgentMustBeAMacOSExecutable(t *testing.T) {
	if err := checkMachO(machOHeader(2)); err != nil { // MH_EXECUTE
		t.Errorf("a Mach-O executable is refused: %v", err)
	}
	if err := checkMachO(machOHeader(6)); err == nil { // MH_DYLIB
		t.Error("a Mach-O dylib is accepted")
	}
	if err := checkMachO([]byte("#!/bin/sh\n")); err == nil {
		t.Error("a shell script is accepted")
	}
	if runtime.GOOS != "darwin" {
		self, err := os.ReadFile(os.Args[0]) //nolint:gosec // this test binary, built for the host.
		if err != nil {
			t.Fatal(err)
		}
		if err := checkMachO(self); err == nil {
			t.Errorf("a %s binary is accepted", runtime.GOOS)
		}
	}
}

func TestModTimeIsTheFlagThenSourceDateEpochThenTheEpoch(t *testing.T) {
	tests := map[string]struct {
		flag            int64
		sourceDateEpoch string
		want            int64
	}{
		"the flag wins":                 {flag: 5, sourceDateEpoch: "7", want: 5},
		"SOURCE_DATE_EPOCH without it":  {flag: -1, sourceDateEpoch: "7", want: 7},
		"the epoch without either":      {flag: -1, want: 0},
		"a flag of 0 is the epoch, set": {flag: 0, sourceDateEpoch: "7", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := modTime(tc.flag, tc.sourceDateEpoch)
			if err != nil || !got.Equal(time.Unix(tc.want, 0)) {
				t.Errorf("modTime = %v, %v; want %d", got.Unix(), err, tc.want)
			}
		})
	}
	if _, err := modTime(-1, "yesterday"); err == nil {
		t.Error("a SOURCE_DATE_EPOCH that is no number is accepted")
	}
}
