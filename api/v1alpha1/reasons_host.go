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

import "time"

// The Apple host: licence slots and drains (docs/licensing.md,
// docs/operations.md).

// ResourceMacOSSlots is the node resource that counts the macOS VMs an
// Apple-hardware node may run. The operator advertises it on every node
// labelled LabelAppleHardware, and every rendered VM requests one, so the
// scheduler places no more macOS VMs on a Mac than it has slots.
const ResourceMacOSSlots = "macvirt.io/macos-slots"

// AnnotationMacOSSlots is the Node annotation (or label of the same key)
// that sets the number of slots the node advertises instead of
// DefaultMacOSSlots: a whole number from 0 to MaxMacOSSlots. The annotation
// wins over the label.
const AnnotationMacOSSlots = ResourceMacOSSlots

// DefaultMacOSSlots is what the macOS licence allows: two macOS instances
// in virtual machines per Mac.
const DefaultMacOSSlots = 2

// MaxMacOSSlots bounds the per-node setting.
const MaxMacOSSlots = 64

// DefaultDrainGracePeriod is how long a bound machine on a draining node
// keeps running for its tenant before it is stopped gracefully.
const DefaultDrainGracePeriod = time.Hour

// ConditionHostDraining is True, on a MacMachine and its MacClaim, while
// the machine's node is being drained and the machine waits for its claim
// to release it or for the class's drainGracePeriod to end. It is absent
// otherwise.
const ConditionHostDraining = "HostDraining"

// Reasons of the Apple host.
const (
	// ReasonEvacuationRequested means KubeVirt marked the machine's
	// instance for evacuation (a drain evicted its virt-launcher pod under
	// evictionStrategy External): the machine still runs and is stopped
	// gracefully when its claim releases it or its drain grace ends.
	ReasonEvacuationRequested = "EvacuationRequested"
	// ReasonDrainStop means the machine is being stopped gracefully because
	// its node is drained: it was idle, or its drain grace ended.
	ReasonDrainStop = "DrainStop"
	// ReasonMacOSSlotsExhausted means the machine's VM cannot be scheduled
	// because no Apple node it may run on has a free macOS slot.
	ReasonMacOSSlotsExhausted = "MacOSSlotsExhausted"
)
