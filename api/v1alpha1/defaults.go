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
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of the fields that are pointers so that a Go client which omits
// them gets the CRD default. The +kubebuilder:default markers carry the same
// values; the accessors below return them when a field is unset (an object
// that never went through the API server).
var (
	DefaultCPU                 int32 = 4
	DefaultMemory                    = resource.MustParse("8Gi")
	DefaultImageSize                 = resource.MustParse("128Gi")
	DefaultBootloaderSize            = resource.MustParse("1Gi")
	DefaultShutdownGracePeriod       = 5 * time.Minute
	DefaultBootTimeout               = 20 * time.Minute
	DefaultHeartbeatTimeout          = 2 * time.Minute
)

// Defaults of the non-pointer fields; the CRD carries the same values.
const (
	DefaultCPUModel              = CPUModelHaswellNoTSX
	DefaultNICModel              = NICModelVmxnet3
	DefaultDiskBus               = DiskBusSATA
	DefaultSMCMode               = SMCModeVirtualSMC
	DefaultProductName           = "iMacPro1,1"
	DefaultDisplayModel          = DisplayModelVGA
	DefaultPoolNamespace         = "macvirt-pools"
	DefaultPoolIdle        int32 = 1
	DefaultMaxProvisioning int32 = 2
	DefaultReclaimPolicy         = ReclaimDelete
)

// LabelAppleHardware marks, and taints, the nodes that may run macOS. A
// class's default placement selects it and tolerates its NoSchedule taint.
const LabelAppleHardware = "macvirt.io/apple-hardware"

// MemoryOrDefault returns the guest memory.
func (r *ClassResources) MemoryOrDefault() resource.Quantity {
	if r.Memory == nil {
		return DefaultMemory.DeepCopy()
	}
	return r.Memory.DeepCopy()
}

// SizeOrDefault returns the system disk size.
func (i *ImageSpec) SizeOrDefault() resource.Quantity {
	if i.Size == nil {
		return DefaultImageSize.DeepCopy()
	}
	return i.Size.DeepCopy()
}

// SizeOrDefault returns the bootloader disk size.
func (b *BootloaderSpec) SizeOrDefault() resource.Quantity {
	if b.Size == nil {
		return DefaultBootloaderSize.DeepCopy()
	}
	return b.Size.DeepCopy()
}

// ShutdownGracePeriodOrDefault returns the ACPI shutdown budget.
func (l *LifecycleSpec) ShutdownGracePeriodOrDefault() time.Duration {
	if l.ShutdownGracePeriod == nil {
		return DefaultShutdownGracePeriod
	}
	return l.ShutdownGracePeriod.Duration
}

// BootTimeoutOrDefault returns the boot timeout.
func (l *LifecycleSpec) BootTimeoutOrDefault() time.Duration {
	if l.BootTimeout == nil {
		return DefaultBootTimeout
	}
	return l.BootTimeout.Duration
}

// HeartbeatTimeoutOrDefault returns the heartbeat timeout.
func (l *LifecycleSpec) HeartbeatTimeoutOrDefault() time.Duration {
	if l.HeartbeatTimeout == nil {
		return DefaultHeartbeatTimeout
	}
	return l.HeartbeatTimeout.Duration
}

// DrainGracePeriodOrDefault returns how long a bound machine on a draining
// node keeps running.
func (l *LifecycleSpec) DrainGracePeriodOrDefault() time.Duration {
	if l.DrainGracePeriod == nil {
		return DefaultDrainGracePeriod
	}
	return l.DrainGracePeriod.Duration
}
