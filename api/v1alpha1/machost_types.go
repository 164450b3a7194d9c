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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Host conditions. The host agent sets the first three in status.agent;
// the operator sets Ready and Schedulable in status.conditions.
const (
	// HostConditionToolReachable: the host agent reaches its tool (lume's
	// API, the tart command).
	HostConditionToolReachable = "ToolReachable"
	// HostConditionVMLimitStuck: the Virtualization framework refuses to
	// start a VM with its VM-limit error while no VM runs; only a reboot
	// of the Mac clears it.
	HostConditionVMLimitStuck = "VMLimitStuck"
	// HostConditionDiskPressure: the host's free disk is below what a new
	// VM needs.
	HostConditionDiskPressure = "DiskPressure"
	// HostConditionDHCPLeaseTooLong: the Mac's DHCP server leases the VMs'
	// addresses for longer than an hour (macOS's default is a day), so a
	// Mac that makes and deletes VMs all day runs out of addresses.
	HostConditionDHCPLeaseTooLong = "DHCPLeaseTooLong"
	// HostConditionNoLoginSession: the user the tool runs as has no GUI
	// session on the Mac (no one, or another user, is logged in at its
	// screen), and the Virtualization framework starts no macOS 15.2 or
	// later guest for such a user; nothing is placed on the Mac.
	HostConditionNoLoginSession = "NoLoginSession"
	// HostConditionToolOutdated: the tool is older than the version the
	// host agent follows (a warning; it does not stop placement).
	HostConditionToolOutdated = "ToolOutdated"
	// HostConditionImageRefreshFailed: the last scheduled pull of a class
	// image the Mac caches (image.refresh) failed, or the tool cannot
	// refresh one; the Mac's idle machines keep the digest they have (a
	// warning; it does not stop placement).
	HostConditionImageRefreshFailed = "ImageRefreshFailed"
	// HostConditionSchedulable: the operator places new machines here.
	HostConditionSchedulable = "Schedulable"
)

// Host reasons.
const (
	// ReasonHostLost: the host agent's lease expired; the host's machines
	// are Failed, never moved.
	ReasonHostLost = "HostLost"
	// ReasonHostNotRegistered: no host agent has reported yet.
	ReasonHostNotRegistered = "NotRegistered"
	// ReasonHostCordoned: spec.unschedulable is set.
	ReasonHostCordoned = "Cordoned"
	// ReasonHostFull: every slot of the host holds a machine.
	ReasonHostFull = "Full"
	// ReasonNoHostAvailable: no MacHost can take a machine now; the
	// message says why for each.
	ReasonNoHostAvailable = "NoHostAvailable"
	// ReasonHostVMFailed: the host agent could not make, start or stop the
	// machine's VM; the message is the tool's words.
	ReasonHostVMFailed = "HostVMFailed"
)

// HostAgentNamespace holds the host agents' ServiceAccounts, each named
// like its Mac (and its MacHost); the operator takes a token of
// system:serviceaccount:macvirt-hosts:NAME as the agent of MacHost NAME.
const HostAgentNamespace = "macvirt-hosts"

// DefaultHostLease is how long a host stays alive after a heartbeat when
// its agent gives no lease.
const DefaultHostLease = 60 * time.Second

// MacHostSpec is what the admin says about a Mac.
type MacHostSpec struct {
	// unschedulable cordons the host: no new machine is placed on it;
	// machines already there keep running.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// HostAgentReport is what the host agent reports about its Mac. Only the
// host agent writes it.
type HostAgentReport struct {
	// agentVersion is the host agent's version.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// tool is what drives the VMs: lume or tart.
	// +kubebuilder:validation:Enum=lume;tart
	// +optional
	Tool string `json:"tool,omitempty"`
	// chip is the Mac's chip (Apple M2 Pro).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Chip string `json:"chip,omitempty"`
	// macOSVersion is the host's macOS version.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	MacOSVersion string `json:"macOSVersion,omitempty"`
	// slots is how many macOS VMs may run at once (2 under Apple's
	// licence, enforced by the Virtualization framework).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	Slots int32 `json:"slots,omitempty"`
	// runningVMs is how many VMs the tool shows running.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RunningVMs int32 `json:"runningVMs,omitempty"`
	// suspendedVMs is how many of the tool's VMs are suspended: their
	// memory is saved beside their disk and they hold no slot.
	// +kubebuilder:validation:Minimum=0
	// +optional
	SuspendedVMs int32 `json:"suspendedVMs,omitempty"`
	// suspendUnsupported says why the host cannot suspend VMs (lume; macOS
	// before 14); empty when it can. A suspended pool keeps its idle
	// machines on such a host running.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	SuspendUnsupported string `json:"suspendUnsupported,omitempty"`
	// freeDisk is the free space where the tool keeps its VMs.
	// +optional
	FreeDisk *resource.Quantity `json:"freeDisk,omitempty"`
	// cachedImages are the VM images the tool has cached, as OCI
	// references.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	CachedImages []string `json:"cachedImages,omitempty"`
	// lastHeartbeat is when the agent last reported.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`
	// leaseSeconds is how long the host counts as alive after
	// lastHeartbeat; unset: 60.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=3600
	// +optional
	LeaseSeconds *int32 `json:"leaseSeconds,omitempty"`
	// conditions: ToolReachable, VMLimitStuck, DiskPressure.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Lease is how long the host counts as alive after a heartbeat.
func (r *HostAgentReport) Lease() time.Duration {
	if r == nil || r.LeaseSeconds == nil {
		return DefaultHostLease
	}
	return time.Duration(*r.LeaseSeconds) * time.Second
}

// MacHostStatus is the observed state of a Mac.
type MacHostStatus struct {
	// observedGeneration is the generation the operator's fields were
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// agent is what the host agent reports; only the host agent writes it.
	// +optional
	Agent *HostAgentReport `json:"agent,omitempty"`
	// conditions: Ready (the lease is current, the tool answers, the VM
	// count is not stuck) and Schedulable (Ready, not cordoned, no disk
	// pressure). Only the operator writes them.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// machines is how many MacMachines the operator placed on the host.
	// +optional
	Machines int32 `json:"machines,omitempty"`
	// suspendedMachines is how many of them are idle with their VM
	// suspended: they hold no licence slot.
	// +optional
	SuspendedMachines int32 `json:"suspendedMachines,omitempty"`
}

// MacHost is an Apple-silicon Mac whose macvirt host agent runs the
// machines of Virtualization classes placed on it. The host agent
// registers it and reports into status.agent; the operator places machines
// and says whether the host is Ready.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mh,categories=macvirt
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.status.agent.tool`
// +kubebuilder:printcolumn:name="Chip",type=string,JSONPath=`.status.agent.chip`
// +kubebuilder:printcolumn:name="macOS",type=string,JSONPath=`.status.agent.macOSVersion`
// +kubebuilder:printcolumn:name="Slots",type=integer,JSONPath=`.status.agent.slots`
// +kubebuilder:printcolumn:name="Machines",type=integer,JSONPath=`.status.machines`
// +kubebuilder:printcolumn:name="Suspended",type=integer,JSONPath=`.status.suspendedMachines`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Schedulable",type=string,JSONPath=`.status.conditions[?(@.type=="Schedulable")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacHost struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the admin says about the Mac.
	// +optional
	Spec MacHostSpec `json:"spec,omitempty"`

	// status is what the host agent and the operator observe.
	// +optional
	Status MacHostStatus `json:"status,omitempty"`
}

// MacHostList is a list of MacHost.
// +kubebuilder:object:root=true
type MacHostList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacHost `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacHost{}, &MacHostList{})
		return nil
	})
}
