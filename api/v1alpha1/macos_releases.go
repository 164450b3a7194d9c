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
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MacOSRelease is a macOS major version: 11 (Big Sur) to 26 (Tahoe).
// +kubebuilder:validation:Enum="11";"12";"13";"14";"15";"26"
type MacOSRelease string

// The macOS releases macvirt knows the hardware of (docs/macos-releases.md).
const (
	MacOSBigSur   MacOSRelease = "11"
	MacOSMonterey MacOSRelease = "12"
	MacOSVentura  MacOSRelease = "13"
	MacOSSonoma   MacOSRelease = "14"
	MacOSSequoia  MacOSRelease = "15"
	MacOSTahoe    MacOSRelease = "26"
)

// MacOSSpec says which macOS a class's golden image holds.
type MacOSSpec struct {
	// release is the macOS major version of the image: 11 (Big Sur), 12
	// (Monterey), 13 (Ventura), 14 (Sonoma), 15 (Sequoia) or 26 (Tahoe).
	// It picks the hardware defaults known to work for it (an unset
	// cpuModel, nicModel or smbios.productName), and a class whose hardware
	// that release is known not to boot on is refused. Unset: the defaults
	// of macOS 11 to 15, and no check.
	// +optional
	Release MacOSRelease `json:"release,omitempty"`
}

// MacOSReleaseInfo is what macvirt uses of a release's entry in the
// matrix; docs/macos-releases.md has the rest (OpenCore versions, sources).
type MacOSReleaseInfo struct {
	// Name is the release's marketing name.
	Name string
	// ProductName, CPUModel and NICModel are the hardware defaults.
	ProductName string
	CPUModel    CPUModel
	NICModel    NICModel
	// NeedsAVX2 is true from macOS 13 on.
	NeedsAVX2 bool
}

// MacOSReleases is the release matrix (docs/macos-releases.md lists the
// sources of each entry).
var MacOSReleases = map[MacOSRelease]MacOSReleaseInfo{
	MacOSBigSur:   {Name: "Big Sur", ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel},
	MacOSMonterey: {Name: "Monterey", ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel},
	MacOSVentura:  {Name: "Ventura", ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel, NeedsAVX2: true},
	MacOSSonoma:   {Name: "Sonoma", ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel, NeedsAVX2: true},
	MacOSSequoia:  {Name: "Sequoia", ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel, NeedsAVX2: true},
	// iMacPro1,1 is not among the Macs Tahoe supports; the Mac Pro (2019)
	// is. vmxnet3 is unproven on Tahoe, virtio-net works.
	MacOSTahoe: {Name: "Tahoe", ProductName: "MacPro7,1", CPUModel: DefaultCPUModel, NICModel: NICModelVirtio, NeedsAVX2: true},
}

// modelLastRelease is, for the Intel Mac models a VM commonly claims to
// be, the newest release Apple supports them on; all of them run macOS 11.
var modelLastRelease = map[string]MacOSRelease{
	"MacPro6,1": MacOSMonterey, "iMac17,1": MacOSMonterey,
	"iMac18,1": MacOSVentura, "iMac18,2": MacOSVentura, "iMac18,3": MacOSVentura,
	"iMacPro1,1": MacOSSequoia, "iMac19,1": MacOSSequoia, "iMac19,2": MacOSSequoia, "Macmini8,1": MacOSSequoia,
	"MacBookPro15,1": MacOSSequoia, "MacBookPro15,2": MacOSSequoia, "MacBookPro16,3": MacOSSequoia,
	"MacPro7,1": MacOSTahoe, "iMac20,1": MacOSTahoe, "iMac20,2": MacOSTahoe,
	"MacBookPro16,1": MacOSTahoe, "MacBookPro16,2": MacOSTahoe, "MacBookPro16,4": MacOSTahoe,
}

// number is the release's major version as a number.
func (r MacOSRelease) number() int {
	n, _ := strconv.Atoi(string(r))
	return n
}

// String names the release: "macOS 26 (Tahoe)".
func (r MacOSRelease) String() string {
	if info, ok := MacOSReleases[r]; ok {
		return fmt.Sprintf("macOS %s (%s)", string(r), info.Name)
	}
	return "macOS " + string(r)
}

// SupportedModels lists, sorted, the known models the release supports.
func (r MacOSRelease) SupportedModels() []string {
	var out []string
	for model, last := range modelLastRelease {
		if last.number() >= r.number() {
			out = append(out, model)
		}
	}
	slices.Sort(out)
	return out
}

// Release is the class's macOS release, "" when it names none.
func (s *MacClassSpec) Release() MacOSRelease {
	if s.MacOS == nil {
		return ""
	}
	return s.MacOS.Release
}

// EffectiveHardware is the class's hardware with every unset field
// defaulted, from its macOS release's table entry where it names one.
func (s *MacClassSpec) EffectiveHardware() HardwareSpec {
	h := *s.Hardware.DeepCopy()
	info, ok := MacOSReleases[s.Release()]
	if !ok {
		info = MacOSReleaseInfo{ProductName: DefaultProductName, CPUModel: DefaultCPUModel, NICModel: DefaultNICModel}
	}
	if h.CPUModel == "" {
		h.CPUModel = info.CPUModel
	}
	if h.NICModel == "" {
		h.NICModel = info.NICModel
	}
	if h.SMBIOS.ProductName == "" {
		h.SMBIOS.ProductName = info.ProductName
	}
	if h.DiskBus == "" {
		h.DiskBus = DefaultDiskBus
	}
	if h.SMC.Mode == "" {
		h.SMC.Mode = DefaultSMCMode
	}
	if h.Display.Model == "" {
		h.Display.Model = DefaultDisplayModel
	}
	return h
}

// HardwareProblem is a hardware field the class's release does not boot
// with.
type HardwareProblem struct {
	// Field is the path under spec.hardware, Value its value.
	Field, Value, Message string
}

// ReleaseHardwareProblems lists what in hw the release is known not to boot
// with, each with a message naming what works; none without a release.
func ReleaseHardwareProblems(r MacOSRelease, hw HardwareSpec) []HardwareProblem {
	info, ok := MacOSReleases[r]
	if !ok {
		return nil
	}
	var out []HardwareProblem
	if last, known := modelLastRelease[hw.SMBIOS.ProductName]; known && last.number() < r.number() {
		out = append(out, HardwareProblem{Field: "smbios.productName", Value: hw.SMBIOS.ProductName, Message: fmt.Sprintf(
			"%s does not support %s (its last release is %s): set one of %s, or remove spec.hardware.smbios.productName "+
				"(perhaps an earlier default) to get %s; to run an unsupported model anyway (patched bootloaders), remove spec.macOS.release",
			r, hw.SMBIOS.ProductName, last, strings.Join(r.SupportedModels(), ", "), info.ProductName)})
	}
	if info.NeedsAVX2 && hw.CPUModel == CPUModelPenryn {
		out = append(out, HardwareProblem{Field: "cpuModel", Value: string(hw.CPUModel), Message: fmt.Sprintf(
			"%s needs AVX2, which Penryn lacks: use %s, %s or %s (an OpenCore image carrying the CryptexFixup kext boots Penryn anyway: "+
				"remove spec.macOS.release to use it)",
			r, CPUModelHaswellNoTSX, CPUModelSkylakeClientNoTSXIBS, CPUModelHostPassthrough)})
	}
	return out
}

// ReleaseDefaults is the hardware a class of release r gets for unset
// fields (r "" for a class that names no release).
func ReleaseDefaults(r MacOSRelease) HardwareSpec {
	spec := MacClassSpec{}
	if r != "" {
		spec.MacOS = &MacOSSpec{Release: r}
	}
	return spec.EffectiveHardware()
}
