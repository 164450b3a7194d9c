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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MachinePhase summarises a machine for humans; conditions are the API.
// Every phase is derived from observation, so a restarted operator lands on
// the same phase.
// +kubebuilder:validation:Enum=Pending;Provisioning;Starting;Booting;Ready;Suspended;Stopping;Stopped;Failed;Terminating
type MachinePhase string

// Machine phases.
const (
	// MachinePending: finalizer added, disks not yet requested.
	MachinePending MachinePhase = "Pending"
	// MachineProvisioning: system and bootloader DataVolumes importing or cloning.
	MachineProvisioning MachinePhase = "Provisioning"
	// MachineStarting: the VirtualMachine should run; its VMI is not Running yet.
	MachineStarting MachinePhase = "Starting"
	// MachineBooting: the VMI runs; the first guest-agent heartbeat is awaited.
	MachineBooting MachinePhase = "Booting"
	// MachineReady: the last heartbeat is fresher than heartbeatTimeout.
	MachineReady MachinePhase = "Ready"
	// MachineSuspended: unbound and Ready to bind, its VM suspended on its
	// MacHost (it holds no licence slot); a binding resumes it.
	MachineSuspended MachinePhase = "Suspended"
	// MachineStopping: a graceful stop was requested; the VMI still runs.
	MachineStopping MachinePhase = "Stopping"
	// MachineStopped: spec.running is false and the VMI is gone; disks are kept.
	MachineStopped MachinePhase = "Stopped"
	// MachineFailed: a DataVolume failed, boot timed out or the VM crash-loops. Terminal.
	MachineFailed MachinePhase = "Failed"
	// MachineTerminating: deletion in progress (graceful stop, then delete).
	MachineTerminating MachinePhase = "Terminating"
)

// MachineSMBIOS is the per-machine SMBIOS identity, generated once.
type MachineSMBIOS struct {
	// serialNumber is the system serial number (12 characters, Apple format).
	// +kubebuilder:validation:Pattern=`^[A-Z0-9]{12}$`
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// boardSerial is the main logic board serial (17 characters, Apple format).
	// +kubebuilder:validation:Pattern=`^[A-Z0-9]{17}$`
	// +optional
	BoardSerial string `json:"boardSerial,omitempty"`
	// uuid is the SMBIOS system UUID.
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`
	// +optional
	UUID string `json:"uuid,omitempty"`
}

// MacMachineSpec is one macOS VM.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.claimRef) || (has(self.claimRef) && self.claimRef == oldSelf.claimRef)",message="claimRef is set once at binding and never changed afterwards"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.smbios) || (has(self.smbios) && self.smbios == oldSelf.smbios)",message="smbios is generated once and immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.classRevision) || (has(self.classRevision) && self.classRevision == oldSelf.classRevision)",message="classRevision is recorded once and immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.hostName) || (has(self.hostName) && self.hostName == oldSelf.hostName)",message="hostName is set once, when the operator places the machine, and a machine is never moved"
type MacMachineSpec struct {
	// className is the MacClass the machine is rendered from. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable"
	// +required
	ClassName string `json:"className"`

	// classRevision is the class revision the machine was rendered from,
	// recorded once (by its creator, or by the operator at first render) and
	// immutable afterwards; a pool replaces idle machines of an old revision.
	// The operator keeps a snapshot of every revision a machine records, so a
	// machine whose class changes or is deleted keeps rendering and running
	// from its own revision (condition ClassUpToDate says so).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ClassRevision string `json:"classRevision,omitempty"`

	// claimRef is the claim the machine is bound to; set once at binding.
	// +optional
	ClaimRef *ObjectRef `json:"claimRef,omitempty"`

	// smbios is the machine's SMBIOS identity, generated once when created.
	// +optional
	SMBIOS *MachineSMBIOS `json:"smbios,omitempty"`

	// hostName is the MacHost a machine of a Virtualization class is placed
	// on; the operator sets it once and never changes it. Empty for
	// KubeVirt machines.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	HostName string `json:"hostName,omitempty"`

	// running: false stops the VM gracefully and keeps its disks; true
	// (default) starts it.
	// +kubebuilder:default=true
	// +optional
	Running *bool `json:"running,omitempty"`

	// suspendWhenIdle: while the machine has never been bound, its host
	// agent keeps its VM suspended once the guest agent has reported (its
	// memory saved beside its disk, holding no licence slot), and a binding
	// resumes it. A pool whose idleState is Suspended sets it. Only hosts
	// whose tool can suspend (tart on macOS 14 or later) do; elsewhere the
	// VM runs.
	// +optional
	SuspendWhenIdle bool `json:"suspendWhenIdle,omitempty"`
}

// ProvisioningStatus reports disk import progress.
type ProvisioningStatus struct {
	// progress of the slowest DataVolume, rounded down to a multiple of 10 %
	// (CDI's "45.20%" shows as "40%"); while CDI cannot tell ("N/A"), the
	// last known value stays.
	// +optional
	Progress string `json:"progress,omitempty"`

	// cloneStrategy is how CDI made the system disk, as it annotated the
	// disk's PVC: snapshot, csi-clone or copy (host-assisted, a full copy);
	// empty for an import.
	// +optional
	CloneStrategy string `json:"cloneStrategy,omitempty"`

	// duration is how long the system disk took, from its DataVolume's
	// creation to Succeeded.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// GuestStatus is what the guest agent inside macOS last reported.
type GuestStatus struct {
	// agentVersion is the guest agent's version.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// osVersion is the macOS product version (e.g. 14.5).
	// +optional
	OSVersion string `json:"osVersion,omitempty"`
	// osBuild is the macOS build (e.g. 23F79).
	// +optional
	OSBuild string `json:"osBuild,omitempty"`
	// hostname is the guest's hostname.
	// +optional
	Hostname string `json:"hostname,omitempty"`
	// bootTime is when macOS booted.
	// +optional
	BootTime *metav1.Time `json:"bootTime,omitempty"`
	// lastHeartbeat is when the operator last wrote a heartbeat. A
	// heartbeat that says nothing new is written only once this is 1.25
	// heartbeatIntervalSeconds old, so a steady guest's is written about
	// every other interval.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`
	// heartbeatIntervalSeconds is the interval the operator gave the agent
	// in its answer to this heartbeat; silence is judged from
	// lastHeartbeat plus 1.25 of it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	HeartbeatIntervalSeconds int32 `json:"heartbeatIntervalSeconds,omitempty"`
	// resumes is status.host.resumes when the operator heard this
	// heartbeat: a guest heard since its VM's last resume reports with
	// the identity it renewed then.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Resumes int32 `json:"resumes,omitempty"`
	// ipAddresses are the guest's IP addresses.
	// +listType=atomic
	// +optional
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// sshHostKeys are the guest's SSH host public keys, "<type> <base64>".
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	SSHHostKeys []string `json:"sshHostKeys,omitempty"`
	// applyError is why the guest agent could not apply what the operator
	// last asked of it (the bound claim's SSH keys, the hostname), in the
	// agent's words; empty once it did.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ApplyError string `json:"applyError,omitempty"`
	// protocolVersion is the guest-agent protocol the agent spoke (v1,
	// v2); an agent before v2 runs no bootstrap.
	// +kubebuilder:validation:MaxLength=8
	// +optional
	ProtocolVersion string `json:"protocolVersion,omitempty"`
	// tasks are the bound claim's bootstrap tasks as the agent last
	// reported them, and a task the operator could not hand over yet (a
	// Secret it could not read), as Pending with the reason in message.
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	Tasks []GuestTaskStatus `json:"tasks,omitempty"`
}

// HostVMState is a Virtualization machine's VM as its host agent sees it.
// +kubebuilder:validation:Enum=Creating;Stopped;Starting;Running;Stopping;Suspending;Suspended;Deleted
type HostVMState string

// Host VM states.
const (
	// HostVMCreating: the agent is making the VM from the class's image
	// (pulling it when the host has not cached it).
	HostVMCreating HostVMState = "Creating"
	// HostVMStopped: the VM exists and does not run.
	HostVMStopped HostVMState = "Stopped"
	// HostVMStarting: a start was asked; the VM does not run yet.
	HostVMStarting HostVMState = "Starting"
	// HostVMRunning: the Virtualization framework runs the VM.
	HostVMRunning HostVMState = "Running"
	// HostVMStopping: macOS was asked to shut down and still runs.
	HostVMStopping HostVMState = "Stopping"
	// HostVMSuspending: the tool is saving the VM's memory.
	HostVMSuspending HostVMState = "Suspending"
	// HostVMSuspended: the VM's memory is saved beside its disk and it does
	// not run; its next start resumes it where it was.
	HostVMSuspended HostVMState = "Suspended"
	// HostVMDeleted: the machine is being deleted and its VM is gone from
	// the host.
	HostVMDeleted HostVMState = "Deleted"
)

// HostVMStatus is what the host agent reports about a Virtualization
// machine's VM. Only the agent of the machine's host writes it.
type HostVMStatus struct {
	// vmName is the VM's name on the host.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	VMName string `json:"vmName,omitempty"`
	// state is the VM's state.
	// +optional
	State HostVMState `json:"state,omitempty"`
	// address is the guest's address on the host's NAT network.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Address string `json:"address,omitempty"`
	// macAddress is the VM's network MAC address, as its tool's
	// configuration says (tart); the Mac's DHCP server leases its address
	// by it, so no two VMs that run on one Mac have one.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	MACAddress string `json:"macAddress,omitempty"`
	// runningSince is when the agent saw the VM start running.
	// +optional
	RunningSince *metav1.Time `json:"runningSince,omitempty"`
	// stopRequestedAt is when the agent asked macOS to shut down.
	// +optional
	StopRequestedAt *metav1.Time `json:"stopRequestedAt,omitempty"`
	// suspendedAt is when the agent suspended the VM, once its guest agent
	// had reported; it stays set after a resume.
	// +optional
	SuspendedAt *metav1.Time `json:"suspendedAt,omitempty"`
	// resumedAt is when the agent resumed the suspended VM for the
	// machine's claim. The guest it restores wakes with what it was when
	// suspended: it must take the new token and make new SSH host keys
	// before the operator counts it Ready.
	// +optional
	ResumedAt *metav1.Time `json:"resumedAt,omitempty"`
	// resumes counts the agent's resumes of the VM from a saved state; it
	// is raised before the VM runs, so the operator tells a guest heard
	// since the last one (status.guest.resumes) without comparing clocks.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Resumes int32 `json:"resumes,omitempty"`
	// error is the agent's or the tool's last failure with this VM, in
	// their words; empty once the step succeeds.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Error string `json:"error,omitempty"`
	// imageDigest is the digest of the image the VM was made from, as the
	// Mac's tool resolved the class's image (tart; lume does not say).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ImageDigest string `json:"imageDigest,omitempty"`
	// latestImageDigest is the digest the host's cache holds for the
	// class's image now, for a class whose image.refresh pulls it again: it
	// differs from imageDigest once the tag was pushed again, and a pool
	// then replaces the VM while it is idle.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	LatestImageDigest string `json:"latestImageDigest,omitempty"`
	// pull is the image pull that makes the VM, while the agent makes it;
	// cleared once the VM exists.
	// +optional
	Pull *HostPullStatus `json:"pull,omitempty"`
}

// HostErrorKeptRunning starts status.host.error for an idle machine its
// host agent keeps running rather than suspended (spec.suspendWhenIdle),
// followed by why.
const HostErrorKeptRunning = "kept running: "

// HostPullStatus is a host agent's pull of a machine's image. Pulls run
// beside the agent's other work: a long one delays no stop or start of
// another machine on the Mac.
type HostPullStatus struct {
	// image is the OCI reference being pulled.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// queued: the image is not on the Mac, and the pull waits for one of
	// the host's concurrent pulls (the agent's --max-pulls) to end.
	// +optional
	Queued bool `json:"queued,omitempty"`
	// startedAt is when the agent began making the VM.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// totalBytes is the image's compressed disk size as the tool reports
	// it (tart's "pulling disk (N GB compressed)"); 0 while unknown, and
	// for a tool that does not say (lume, which gives only percent).
	// +kubebuilder:validation:Minimum=0
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// completedBytes is how much of totalBytes has arrived.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CompletedBytes int64 `json:"completedBytes,omitempty"`
	// percent is how much of the pull is done, as the tool says (lume
	// says only this).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Percent int32 `json:"percent,omitempty"`
}

// MacMachineStatus is the observed state of a machine.
type MacMachineStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase summarises the machine; informational.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// conditions: DisksReady, VMRunning, GuestAgentReady, Ready, Stalled,
	// ClassUpToDate.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// virtualMachineName is the KubeVirt VirtualMachine, in the machine's namespace.
	// +optional
	VirtualMachineName string `json:"virtualMachineName,omitempty"`
	// nodeName is the node running the VM.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// addresses are the VM's IP addresses as KubeVirt reports them.
	// +listType=atomic
	// +optional
	Addresses []string `json:"addresses,omitempty"`
	// provisioning reports disk import progress.
	// +optional
	Provisioning *ProvisioningStatus `json:"provisioning,omitempty"`
	// guest is what the guest agent last reported. The operator's agent
	// endpoint writes it, from each heartbeat it accepts; the machine
	// controller writes every other field of the status, and never this one.
	// +optional
	Guest *GuestStatus `json:"guest,omitempty"`
	// runningSince is when the current VMI entered the Running phase, as
	// KubeVirt recorded it (or the host agent saw a Virtualization
	// machine's VM run); bootTimeout counts from it.
	// +optional
	RunningSince *metav1.Time `json:"runningSince,omitempty"`
	// host is what the host agent reports about a Virtualization
	// machine's VM; only that agent writes it.
	// +optional
	Host *HostVMStatus `json:"host,omitempty"`
}

// MacMachine is one macOS VM: a KubeVirt VirtualMachine plus its CDI
// DataVolumes, bound to at most one claim (like a PersistentVolume). Its
// name is used as a label value on everything it owns, hence at most 63
// characters.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it becomes the macvirt.io/machine label value"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mm,categories=macvirt
// +kubebuilder:selectablefield:JSONPath=`.spec.claimRef.uid`
// +kubebuilder:selectablefield:JSONPath=`.spec.className`
// +kubebuilder:selectablefield:JSONPath=`.spec.hostName`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Claim NS",type=string,JSONPath=`.spec.claimRef.namespace`
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.spec.claimRef.name`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.hostName`,priority=1
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.provisioning.progress`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.spec.classRevision`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacMachine struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired machine.
	// +required
	Spec MacMachineSpec `json:"spec"`

	// status is the observed machine.
	// +optional
	Status MacMachineStatus `json:"status,omitempty"`
}

// MacMachineList is a list of MacMachine.
// +kubebuilder:object:root=true
type MacMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacMachine `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacMachine{}, &MacMachineList{})
		return nil
	})
}
