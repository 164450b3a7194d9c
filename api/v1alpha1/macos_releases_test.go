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

package v1alpha1

import (
	"slices"
	"testing"
)

func TestSupportedModelsShrinkWithEachRelease(t *testing.T) {
	tahoe := MacOSTahoe.SupportedModels()
	want := []string{"MacBookPro16,1", "MacBookPro16,2", "MacBookPro16,4", "MacPro7,1", "iMac20,1", "iMac20,2"}
	if !slices.Equal(tahoe, want) {
		t.Fatalf("macOS 26 supports %v, want %v", tahoe, want)
	}
	if slices.Contains(tahoe, "iMacPro1,1") || !slices.Contains(MacOSSequoia.SupportedModels(), "iMacPro1,1") {
		t.Fatal("iMacPro1,1's last release is 15")
	}
	prev := len(MacOSBigSur.SupportedModels())
	for _, r := range []MacOSRelease{MacOSMonterey, MacOSVentura, MacOSSonoma, MacOSSequoia, MacOSTahoe} {
		n := len(r.SupportedModels())
		if n > prev {
			t.Errorf("%s supports more models (%d) than the release before it (%d)", r, n, prev)
		}
		prev = n
		if d := ReleaseDefaults(r); len(ReleaseHardwareProblems(r, d)) != 0 {
			t.Errorf("%s refuses its own defaults %+v", r, d)
		}
	}
}

func TestEffectiveHardware(t *testing.T) {
	legacy := ReleaseDefaults("")
	if legacy.SMBIOS.ProductName != DefaultProductName || legacy.CPUModel != DefaultCPUModel || legacy.NICModel != DefaultNICModel ||
		legacy.DiskBus != DefaultDiskBus || legacy.SMC.Mode != DefaultSMCMode || legacy.Display.Model != DefaultDisplayModel {
		t.Fatalf("a class without a release gets %+v", legacy)
	}
	if got := ReleaseDefaults("99"); got != legacy {
		t.Fatalf("an unknown release gets %+v, want the defaults without one", got)
	}
	if ReleaseHardwareProblems("99", legacy) != nil {
		t.Fatal("an unknown release checks nothing")
	}
	s := MacClassSpec{MacOS: &MacOSSpec{Release: MacOSTahoe}, Hardware: HardwareSpec{NICModel: NICModelE1000}}
	h := s.EffectiveHardware()
	if h.NICModel != NICModelE1000 || h.SMBIOS.ProductName != "MacPro7,1" {
		t.Fatalf("what is set is kept and the rest defaulted from the release: %+v", h)
	}
	if s.Hardware.SMBIOS.ProductName != "" {
		t.Fatal("EffectiveHardware changed the spec")
	}
	if MacOSTahoe.String() != "macOS 26 (Tahoe)" || MacOSRelease("99").String() != "macOS 99" {
		t.Fatalf("names: %s, %s", MacOSTahoe, MacOSRelease("99"))
	}
}
