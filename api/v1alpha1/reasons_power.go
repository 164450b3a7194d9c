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

// Reasons for stops, shutdowns and reboots macvirt did not ask for, or
// that did not go as asked.
const (
	// ReasonForcedPowerOff means macOS did not shut down within the grace
	// period of a graceful stop, so KubeVirt killed the VM: APFS on the
	// system disk may be damaged. The machine is Stalled until it runs again.
	ReasonForcedPowerOff = "ForcedPowerOff"
	// ReasonGuestShutDown means macOS shut itself down (from its menu, or
	// by a crash KubeVirt reports as a clean stop) while the machine should
	// run; KubeVirt starts it again, as runStrategy Always asks.
	ReasonGuestShutDown = "GuestShutDown"
)
