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
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// CPUModel is the CPU model QEMU presents to macOS.
// +kubebuilder:validation:Enum=Haswell-noTSX;Penryn;Skylake-Client-noTSX-IBRS;host-passthrough
type CPUModel string

// Supported CPU models.
const (
	CPUModelHaswellNoTSX          CPUModel = "Haswell-noTSX"
	CPUModelPenryn                CPUModel = "Penryn"
	CPUModelSkylakeClientNoTSXIBS CPUModel = "Skylake-Client-noTSX-IBRS"
	CPUModelHostPassthrough       CPUModel = "host-passthrough"
)

// NICModel is the network card model. vmxnet3 and e1000-82545em have drivers
// in macOS but cannot be expressed in KubeVirt, so the domain hook sets them.
// +kubebuilder:validation:Enum=vmxnet3;e1000-82545em;virtio
type NICModel string

// Supported NIC models.
const (
	NICModelVmxnet3 NICModel = "vmxnet3"
	NICModelE1000   NICModel = "e1000-82545em"
	NICModelVirtio  NICModel = "virtio"
)

// DiskBus is the bus the system and bootloader disks are attached to.
// +kubebuilder:validation:Enum=sata;virtio
type DiskBus string

// Supported disk buses.
const (
	DiskBusSATA   DiskBus = "sata"
	DiskBusVirtio DiskBus = "virtio"
)

// SMCMode selects how the Apple System Management Controller is provided.
// +kubebuilder:validation:Enum=VirtualSMC;AppleSMC
type SMCMode string

// Supported SMC modes.
const (
	// SMCModeVirtualSMC relies on the VirtualSMC kext loaded by OpenCore; it
	// works with any QEMU, including builds without the isa-applesmc device.
	SMCModeVirtualSMC SMCMode = "VirtualSMC"
	// SMCModeAppleSMC emulates the SMC in QEMU (isa-applesmc) and needs the
	// OSK key from a Secret.
	SMCModeAppleSMC SMCMode = "AppleSMC"
)

// DisplayModel is the emulated video card.
// +kubebuilder:validation:Enum=vga;vmware-svga
type DisplayModel string

// Supported display models.
const (
	DisplayModelVGA        DisplayModel = "vga"
	DisplayModelVMwareSVGA DisplayModel = "vmware-svga"
)

// ClassResources sizes the VM.
type ClassResources struct {
	// cpu is the number of vCPUs (one socket, this many cores). macOS does
	// not support CPU hotplug, so the topology is pinned.
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=64
	// +optional
	CPU int32 `json:"cpu,omitempty"`

	// memory is the guest memory, at least 4Gi. macOS does not support
	// memory hotplug, so it is pinned.
	// +kubebuilder:default="8Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('4Gi')) >= 0",message="memory must be at least 4Gi"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// DiskSource says where a disk's content comes from: exactly one of a CDI
// source or a reference to a CDI DataSource.
// +kubebuilder:validation:XValidation:rule="has(self.source) != has(self.sourceRef)",message="set exactly one of source or sourceRef"
type DiskSource struct {
	// source is a CDI DataVolume source (http, registry, s3, pvc, ...).
	// Mutually exclusive with sourceRef.
	// +optional
	Source *cdiv1.DataVolumeSource `json:"source,omitempty"`

	// sourceRef names a CDI DataSource (for example a golden image kept in
	// the macvirt-images namespace). Mutually exclusive with source.
	// +optional
	SourceRef *cdiv1.DataVolumeSourceRef `json:"sourceRef,omitempty"`

	// storageClassName is the StorageClass of the machine's disk; the
	// cluster default when empty.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// ImageSpec is the golden macOS system disk each machine is cloned from.
// +kubebuilder:validation:XValidation:rule="!has(self.refresh) || (has(self.source) && has(self.source.registry))",message="image.refresh keeps a registry image current: set image.source.registry, or remove refresh"
type ImageSpec struct {
	DiskSource `json:",inline"`

	// size of each machine's system disk.
	// +kubebuilder:default="128Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// refresh keeps a registry image current: the operator keeps a CDI
	// DataImportCron in the images namespace that polls source.registry on
	// schedule and imports each new digest, and machines clone the newest
	// import. The class's revision follows the digest, so pools roll their
	// idle machines to it; bound machines are never touched. On a
	// Virtualization class, each host agent that caches the image pulls
	// its tag again on schedule (importsToKeep does not apply), and pools
	// replace the idle machines made from an older digest on that host.
	// +optional
	Refresh *ImageRefresh `json:"refresh,omitempty"`

	// pullPolicy is for Virtualization classes: IfNotPresent (the
	// default) makes each machine's VM from the image the Mac has cached
	// under the tag, whatever the registry now has (tart's clone does
	// so); Always asks the registry for the tag's digest before each new
	// machine and pulls what changed (tart pull), so a re-pushed tag
	// reaches new machines. The digest a VM was made from is in its
	// machine's status.host.imageDigest.
	// +kubebuilder:validation:Enum=IfNotPresent;Always
	// +optional
	PullPolicy ImagePullPolicy `json:"pullPolicy,omitempty"`
}

// ImagePullPolicy is when a Mac pulls a Virtualization class's image.
type ImagePullPolicy string

// Image pull policies.
const (
	// PullIfNotPresent uses the Mac's cached image.
	PullIfNotPresent ImagePullPolicy = "IfNotPresent"
	// PullAlways asks the registry for each new machine.
	PullAlways ImagePullPolicy = "Always"
)

// ImageRefresh is how often a registry image is polled and how many
// imports are kept.
type ImageRefresh struct {
	// schedule is a cron schedule (five fields, as CronJob takes it) at
	// which the registry is polled for a new digest.
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=100
	// +required
	Schedule string `json:"schedule"`

	// importsToKeep is how many imports CDI keeps (its default: 3); older
	// ones are garbage-collected. Machines already cloned keep their disks.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +optional
	ImportsToKeep *int32 `json:"importsToKeep,omitempty"`
}

// InstallerSpec makes a class an installer: its machines boot a macOS
// recovery image beside a blank system disk, and a person installs macOS
// over VNC (docs/golden-image.md).
type InstallerSpec struct {
	// recoverySourceRef names the CDI DataSource holding the macOS recovery
	// image (BaseSystem) the admin imported.
	// +required
	RecoverySourceRef cdiv1.DataVolumeSourceRef `json:"recoverySourceRef"`

	// recoverySize is the size of each machine's recovery disk; unset:
	// 4Gi.
	// +optional
	RecoverySize *resource.Quantity `json:"recoverySize,omitempty"`
}

// BootloaderSpec is the OpenCore disk each machine boots from.
type BootloaderSpec struct {
	DiskSource `json:",inline"`

	// size of each machine's bootloader disk.
	// +kubebuilder:default="1Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
}

// SMCSpec configures the Apple System Management Controller.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'AppleSMC' || has(self.oskSecretRef)",message="smc.mode AppleSMC requires oskSecretRef (the Secret holding the OSK key); use mode VirtualSMC otherwise"
type SMCSpec struct {
	// mode is VirtualSMC (default, works on any QEMU) or AppleSMC (needs a
	// QEMU with isa-applesmc and the OSK key).
	// +kubebuilder:default=VirtualSMC
	// +optional
	Mode SMCMode `json:"mode,omitempty"`

	// oskSecretRef names the Secret key holding the OSK string; required
	// for AppleSMC, ignored otherwise.
	// +optional
	OSKSecretRef *SecretKeyRef `json:"oskSecretRef,omitempty"`
}

// ClassSMBIOS is the SMBIOS identity shared by the class's machines; serial
// numbers and UUIDs are generated per machine.
type ClassSMBIOS struct {
	// productName is the Mac model macOS believes it runs on. Unset: the
	// class's macOS release's default (iMacPro1,1; MacPro7,1 for 26).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ProductName string `json:"productName,omitempty"`
}

// DisplaySpec configures the emulated video card.
type DisplaySpec struct {
	// model is vga (default) or vmware-svga.
	// +kubebuilder:default=vga
	// +optional
	Model DisplayModel `json:"model,omitempty"`
}

// HardwareSpec is the emulated hardware.
type HardwareSpec struct {
	// cpuModel is the CPU model presented to macOS. Unset: the class's
	// macOS release's default (Haswell-noTSX).
	// +optional
	CPUModel CPUModel `json:"cpuModel,omitempty"`

	// nicModel is the network card model. Unset: the class's macOS
	// release's default (vmxnet3; virtio for 26).
	// +optional
	NICModel NICModel `json:"nicModel,omitempty"`

	// diskBus is the bus of the system and bootloader disks.
	// +kubebuilder:default=sata
	// +optional
	DiskBus DiskBus `json:"diskBus,omitempty"`

	// smc configures the Apple SMC.
	// +kubebuilder:default={}
	// +optional
	SMC SMCSpec `json:"smc,omitempty"`

	// smbios is the SMBIOS identity of the class.
	// +kubebuilder:default={}
	// +optional
	SMBIOS ClassSMBIOS `json:"smbios,omitempty"`

	// display configures the video card.
	// +kubebuilder:default={}
	// +optional
	Display DisplaySpec `json:"display,omitempty"`
}

// PlacementSpec says which nodes may run the class's machines. macOS may
// only run on Apple hardware, so the default selects labelled Apple nodes
// and tolerates their taint.
type PlacementSpec struct {
	// nodeSelector is copied to the VM.
	// +kubebuilder:default={"macvirt.io/apple-hardware":"true"}
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations are copied to the VM.
	// +kubebuilder:default={{key:"macvirt.io/apple-hardware",operator:"Exists",effect:"NoSchedule"}}
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// affinity is copied to the VM.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// hostSelector chooses the MacHosts a Virtualization class's machines
	// may be placed on; unset, any host. KubeVirt classes ignore it (they
	// use nodeSelector, tolerations and affinity, which Virtualization
	// classes ignore).
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
}

// AfterGracePolicy is what becomes of a VM that outlives its shutdown
// grace period.
type AfterGracePolicy string

// After a shutdown grace period.
const (
	// AfterGraceWait leaves the VM running and reports it.
	AfterGraceWait AfterGracePolicy = "Wait"
	// AfterGracePowerOff forces a deleted machine's VM off.
	AfterGracePowerOff AfterGracePolicy = "PowerOff"
)

// LifecycleSpec holds the timeouts of a machine's life.
type LifecycleSpec struct {
	// shutdownGracePeriod is the ACPI shutdown budget before KubeVirt forces
	// the VM off; it becomes the VM's terminationGracePeriodSeconds.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="shutdownGracePeriod must be between 1s and 24h"
	// +optional
	ShutdownGracePeriod *metav1.Duration `json:"shutdownGracePeriod,omitempty"`

	// bootTimeout bounds the time from VM running to the first guest-agent
	// heartbeat; past it the machine is Failed.
	// +kubebuilder:default="20m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="bootTimeout must be between 1m and 24h"
	// +optional
	BootTimeout *metav1.Duration `json:"bootTimeout,omitempty"`

	// heartbeatTimeout: a guest agent silent longer than this makes the
	// machine not Ready.
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="heartbeatTimeout must be between 10s and 1h"
	// +optional
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`

	// afterShutdownGracePeriod says what becomes of a deleted machine's VM
	// on an Apple-silicon host when macOS has not shut down within
	// shutdownGracePeriod. Wait (the default) leaves it running and reports
	// it in the machine's status.host.error. PowerOff forces it off and
	// deletes it: for classes whose machines are disposable, such as CI,
	// whose disks are deleted anyway (Orchard does the same for its CI
	// VMs). A machine that is only stopped keeps its disk, and is never
	// forced. Only for runtime Virtualization: on KubeVirt,
	// shutdownGracePeriod is the VM's terminationGracePeriodSeconds, after
	// which KubeVirt forces the VM off.
	// +kubebuilder:validation:Enum=Wait;PowerOff
	// +optional
	AfterShutdownGracePeriod AfterGracePolicy `json:"afterShutdownGracePeriod,omitempty"`

	// drainGracePeriod is how long a bound machine keeps running for its
	// tenant once its node is drained; it is then stopped gracefully (never
	// killed) and started again on another node. 0s stops it at once.
	// Idle machines on a drained node are stopped and replaced at once.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="drainGracePeriod must be between 0s and 168h (7 days)"
	// +optional
	DrainGracePeriod *metav1.Duration `json:"drainGracePeriod,omitempty"`
}

// TenancySpec says who may use the class.
type TenancySpec struct {
	// allowedNamespaces selects, by label, the namespaces whose claims may
	// use this class; empty or absent allows every namespace.
	// +kubebuilder:default={}
	// +optional
	AllowedNamespaces *metav1.LabelSelector `json:"allowedNamespaces,omitempty"`

	// onDemand lets a claim create a machine when no pool has one idle.
	// +kubebuilder:default=true
	// +optional
	OnDemand *bool `json:"onDemand,omitempty"`

	// allowRetain lets claims of this class ask for reclaimPolicy Retain,
	// which keeps their machine, stopped with its disks, after the claim is
	// gone. Set it to false where released Macs would only pile up.
	// +kubebuilder:default=true
	// +optional
	AllowRetain *bool `json:"allowRetain,omitempty"`

	// maxReleasedPerNamespace bounds how many released (Retained) machines
	// of this class the claims of one namespace may leave behind: a claim
	// asking for Retain beyond it waits (TooManyReleased) until one of them
	// is deleted. Unset: no bound.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxReleasedPerNamespace *int32 `json:"maxReleasedPerNamespace,omitempty"`

	// allowedAccessTypes are the access types (a claim's spec.access.type)
	// claims of this class may ask for. NodePort and LoadBalancer reach a
	// Mac from outside the cluster; a LoadBalancer may cost money per claim.
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:default={ClusterIP}
	// +listType=set
	// +optional
	AllowedAccessTypes []AccessType `json:"allowedAccessTypes,omitempty"`

	// allowTenantBootstrap lets claims of this class carry their own
	// spec.bootstrap; unset allows it. The class's own bootstrap runs
	// either way. (No schema default: classes stored before this field
	// existed read back unchanged.)
	// +optional
	AllowTenantBootstrap *bool `json:"allowTenantBootstrap,omitempty"`

	// maxClaimLifetime caps how long a claim of this class keeps its
	// machine (its spec.lifetime), and is the lifetime of claims that name
	// none. A claim keeps the cap it was bound under. Unset: no cap. At
	// least 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="maxClaimLifetime must be at least 1m (a Go duration: 8h, 168h)"
	// +optional
	MaxClaimLifetime *metav1.Duration `json:"maxClaimLifetime,omitempty"`

	// allowRootBootstrap lets a claim's bootstrap run as root, or place
	// files owned by root. Off by default: a claim's script runs as the
	// login user.
	// +optional
	AllowRootBootstrap bool `json:"allowRootBootstrap,omitempty"`
}

// TenantBootstrapAllowed reports whether claims may carry a bootstrap.
func (t TenancySpec) TenantBootstrapAllowed() bool {
	return t.AllowTenantBootstrap == nil || *t.AllowTenantBootstrap
}

// AccessType is how a claim's Service exposes its Mac, as a Service's type.
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
type AccessType string

// Access types.
const (
	AccessClusterIP    AccessType = "ClusterIP"
	AccessNodePort     AccessType = "NodePort"
	AccessLoadBalancer AccessType = "LoadBalancer"
)

// DefaultAccess is the access type of a claim of the class that names none.
func (c *MacClass) DefaultAccess() AccessType {
	if c == nil || c.Spec.Access.DefaultType == "" {
		return AccessClusterIP
	}
	return c.Spec.Access.DefaultType
}

// AccessTypes are the access types the class allows: ClusterIP alone when
// it names none.
func (t TenancySpec) AccessTypes() []AccessType {
	if len(t.AllowedAccessTypes) == 0 {
		return []AccessType{AccessClusterIP}
	}
	return t.AllowedAccessTypes
}

// AllowsAccess reports whether the class lets claims ask for access type t
// (ClusterIP alone when the class names none).
func (t TenancySpec) AllowsAccess(a AccessType) bool {
	if a == "" {
		a = AccessClusterIP
	}
	if len(t.AllowedAccessTypes) == 0 {
		return a == AccessClusterIP
	}
	for _, allowed := range t.AllowedAccessTypes {
		if allowed == a {
			return true
		}
	}
	return false
}

// ClassAccess says what each claim's Service offers besides SSH.
type ClassAccess struct {
	// screenSharing adds port vnc (5900, macOS Screen Sharing) to each
	// claim's Service. The guest must have Screen Sharing turned on.
	// +optional
	ScreenSharing bool `json:"screenSharing,omitempty"`

	// defaultType is the access type of a claim that names none
	// (spec.access.type empty): ClusterIP when unset. It must be among
	// spec.tenancy.allowedAccessTypes.
	// +optional
	DefaultType AccessType `json:"defaultType,omitempty"`

	// allowedPeers may reach a bound machine besides the pods of its
	// claim's namespace (a CI controller's namespace, a bastion's IP
	// block), as NetworkPolicy peers. Everyone else, other tenants
	// included, is kept out by each machine's NetworkPolicy.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	AllowedPeers []networkingv1.NetworkPolicyPeer `json:"allowedPeers,omitempty"`
}

// RuntimeType says what runs a class's machines.
// +kubebuilder:validation:Enum=KubeVirt;Virtualization
type RuntimeType string

// Runtimes.
const (
	// RuntimeKubeVirt runs machines as KubeVirt VMs on Linux nodes of
	// Apple hardware (QEMU, OpenCore, CDI disks). The default.
	RuntimeKubeVirt RuntimeType = "KubeVirt"
	// RuntimeVirtualization runs machines on Apple-silicon Macs
	// (MacHosts) under Apple's Virtualization framework, driven by the
	// macvirt host agent (docs/apple-silicon-hosts.md).
	RuntimeVirtualization RuntimeType = "Virtualization"
)

// MacClassSpec is a hardware and image recipe for macOS machines.
// +kubebuilder:validation:XValidation:rule="(has(self.runtime) && self.runtime == 'Virtualization') || has(self.bootloader)",message="bootloader is required for a KubeVirt class: give the OpenCore disk's source, or set runtime: Virtualization"
// +kubebuilder:validation:XValidation:rule="!has(self.runtime) || self.runtime != 'Virtualization' || !has(self.bootloader)",message="a Virtualization class has no bootloader (the Virtualization framework boots macOS itself): remove spec.bootloader"
// +kubebuilder:validation:XValidation:rule="!has(self.runtime) || self.runtime != 'Virtualization' || (has(self.image.source) && has(self.image.source.registry) && (!has(self.image.refresh) || !has(self.image.refresh.importsToKeep)))",message="a Virtualization class takes its VM image from image.source.registry.url (an OCI reference tart or lume can pull, such as docker://ghcr.io/cirruslabs/macos-sequoia-base:latest); image.refresh.importsToKeep is CDI's, for KubeVirt classes"
// +kubebuilder:validation:XValidation:rule="!has(self.runtime) || self.runtime != 'Virtualization' || !has(self.installer)",message="installer classes run on KubeVirt only: remove spec.installer or the runtime"
// +kubebuilder:validation:XValidation:rule="!has(self.lifecycle) || !has(self.lifecycle.afterShutdownGracePeriod) || self.lifecycle.afterShutdownGracePeriod == 'Wait' || (has(self.runtime) && self.runtime == 'Virtualization')",message="lifecycle.afterShutdownGracePeriod PowerOff is for Virtualization classes: on KubeVirt, KubeVirt forces the VM off after shutdownGracePeriod itself; remove it"
// +kubebuilder:validation:XValidation:rule="!has(self.image.pullPolicy) || (has(self.runtime) && self.runtime == 'Virtualization')",message="image.pullPolicy is for Virtualization classes (a Mac's tool pulls their image); a KubeVirt class's image is CDI's: remove it, or use image.refresh"
// +kubebuilder:validation:XValidation:rule="(has(self.runtime) ? self.runtime : 'KubeVirt') == (has(oldSelf.runtime) ? oldSelf.runtime : 'KubeVirt')",message="runtime is immutable: make a new class for the other runtime"
// +kubebuilder:validation:XValidation:rule="has(self.installer) == (has(self.image.source) && has(self.image.source.blank))",message="a blank system disk (image.source.blank) is for installer classes only: set spec.installer with the recovery DataSource, or give image a source with macOS on it"
type MacClassSpec struct {
	// runtime is what runs the class's machines: KubeVirt (unset means
	// KubeVirt) or Virtualization (Apple-silicon MacHosts). Immutable.
	// +optional
	Runtime RuntimeType `json:"runtime,omitempty"`

	// description is a one-line summary shown to tenants.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Description string `json:"description,omitempty"`

	// resources sizes the VM.
	// +kubebuilder:default={}
	// +optional
	Resources ClassResources `json:"resources,omitempty"`

	// image is the golden macOS system disk.
	// +required
	Image ImageSpec `json:"image"`

	// bootloader is the OpenCore disk of a KubeVirt class; a
	// Virtualization class has none (Apple's Virtualization framework
	// boots macOS itself).
	// +optional
	Bootloader BootloaderSpec `json:"bootloader,omitzero"`

	// installer makes the class an installer: its machines get a blank
	// system disk of image.size (image.source must be blank) and boot the
	// recovery image, and no guest agent is expected; a person installs
	// macOS and the agent over VNC, and a MacImage captures the result.
	// +optional
	Installer *InstallerSpec `json:"installer,omitempty"`

	// macOS says which macOS release the image holds; its hardware
	// defaults fill what hardware leaves unset (docs/macos-releases.md).
	// +optional
	MacOS *MacOSSpec `json:"macOS,omitempty"`

	// hardware is the emulated hardware.
	// +kubebuilder:default={}
	// +optional
	Hardware HardwareSpec `json:"hardware,omitempty"`

	// placement says where machines may run.
	// +kubebuilder:default={}
	// +optional
	Placement PlacementSpec `json:"placement,omitempty"`

	// lifecycle holds the timeouts.
	// +kubebuilder:default={}
	// +optional
	Lifecycle LifecycleSpec `json:"lifecycle,omitempty"`

	// tenancy says who may claim machines of this class.
	// +kubebuilder:default={}
	// +optional
	Tenancy TenancySpec `json:"tenancy,omitempty"`

	// access says what each claim's Service offers besides SSH.
	// +optional
	Access ClassAccess `json:"access,omitempty"`

	// bootstrap is work the guest agent does on every Mac of the class
	// once it is bound, before the claim's own bootstrap. It is inline
	// only (a script and literal values; no Secret or ConfigMap, which
	// would be read in every tenant's namespace) and may run as root.
	// +optional
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
}

// MacClassStatus is the observed state of a MacClass.
type MacClassStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// revision is a short hash of everything in the spec that changes a
	// rendered VM; machines record the revision they were rendered from.
	// +optional
	Revision string `json:"revision,omitempty"`

	// image is the refreshed image's state, for a class with
	// image.refresh.
	// +optional
	Image *ClassImageStatus `json:"image,omitempty"`

	// cloneStrategy is how CDI clones the class's image for each machine,
	// as the StorageProfile of the machines' storage class says: snapshot
	// or csi-clone (fast), or copy (a full copy of the disk per machine;
	// condition FastClones is False then).
	// +optional
	CloneStrategy string `json:"cloneStrategy,omitempty"`

	// conditions: Ready, and Stalled when a referenced source is missing;
	// FastClones, False when each machine's disk is a full copy.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClassImageStatus is where a refreshed image stands.
type ClassImageStatus struct {
	// dataImportCron is the CDI DataImportCron the operator keeps for the
	// class, in the images namespace.
	// +optional
	DataImportCron string `json:"dataImportCron,omitempty"`

	// dataSource is the DataSource the DataImportCron keeps pointing at
	// its newest import.
	// +optional
	DataSource string `json:"dataSource,omitempty"`

	// resolved is the import machines of the current revision clone: the
	// DataSource's source when the operator last looked. Unset until the
	// first import is done; machines wait for it.
	// +optional
	Resolved *ResolvedImage `json:"resolved,omitempty"`

	// digest is the registry digest CDI last polled.
	// +optional
	Digest string `json:"digest,omitempty"`
}

// ResolvedImage is a volume machines clone.
type ResolvedImage struct {
	// kind is PersistentVolumeClaim or VolumeSnapshot.
	// +kubebuilder:validation:Enum=PersistentVolumeClaim;VolumeSnapshot
	Kind string `json:"kind"`
	// namespace of the volume.
	Namespace string `json:"namespace"`
	// name of the volume.
	Name string `json:"name"`
}

// MacClass is a cluster-wide recipe for macOS machines: hardware, images,
// placement, timeouts and who may claim them (like a StorageClass).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mcl,categories=macvirt
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.spec.resources.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.resources.memory`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Clones",type=string,JSONPath=`.status.cloneStrategy`,priority=1
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.image.digest`,priority=1
// +kubebuilder:printcolumn:name="Description",type=string,JSONPath=`.spec.description`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacClass struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the recipe.
	// +required
	Spec MacClassSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status MacClassStatus `json:"status,omitempty"`
}

// MacClassList is a list of MacClass.
// +kubebuilder:object:root=true
type MacClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacClass{}, &MacClassList{})
		return nil
	})
}

// DefaultImportsToKeep is how many imports of a refreshed image CDI keeps
// when image.refresh.importsToKeep is unset (CDI's own default).
const DefaultImportsToKeep int32 = 3

// EffectiveImage is the image machines of the class's current revision are
// made from: spec.image, except that a refreshed image (image.refresh) is
// cloned from the import status.image.resolved names; until the first
// import is done it has no source, and machines wait.
func (c *MacClass) EffectiveImage() ImageSpec {
	img := *c.Spec.Image.DeepCopy()
	if img.Refresh == nil || c.Spec.OnHosts() {
		// A Virtualization class's hosts pull and refresh the image
		// themselves.
		return img
	}
	img.Refresh, img.Source, img.SourceRef = nil, nil, nil
	if c.Status.Image == nil || c.Status.Image.Resolved == nil {
		return img
	}
	r := c.Status.Image.Resolved
	switch r.Kind {
	case ImagePublishedAsSnapshot:
		img.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: r.Namespace, Name: r.Name}}
	default:
		img.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: r.Namespace, Name: r.Name}}
	}
	return img
}

// ImageUnresolved reports a refreshed image whose first import is not done.
// A Virtualization class's image is its hosts' to pull: never unresolved.
func (c *MacClass) ImageUnresolved() bool {
	return c.Spec.Image.Refresh != nil && !c.Spec.OnHosts() && (c.Status.Image == nil || c.Status.Image.Resolved == nil)
}

// RuntimeOrDefault is the class's runtime: KubeVirt when unset.
func (s *MacClassSpec) RuntimeOrDefault() RuntimeType {
	if s.Runtime == "" {
		return RuntimeKubeVirt
	}
	return s.Runtime
}

// OnHosts reports a class whose machines run on MacHosts under the
// Virtualization framework, not on KubeVirt.
func (s *MacClassSpec) OnHosts() bool {
	return s.RuntimeOrDefault() == RuntimeVirtualization
}

// VMImage is the OCI reference of a Virtualization class's VM image, as
// tart and lume take it (without CDI's docker:// scheme); empty for a
// class without a registry image.
func (s *MacClassSpec) VMImage() string {
	if s.Image.Source == nil || s.Image.Source.Registry == nil || s.Image.Source.Registry.URL == nil {
		return ""
	}
	u := *s.Image.Source.Registry.URL
	for _, scheme := range []string{"docker://", "oci-archive://"} {
		if len(u) > len(scheme) && u[:len(scheme)] == scheme {
			return u[len(scheme):]
		}
	}
	return u
}

// CheckVMImage says why ref is not an image a Mac's tool may pull for a
// Virtualization class: it must name a registry (a host with a dot or a
// port, or localhost) and a repository. A bare name would be taken by
// tart as a VM already on the Mac (another machine's disk), and a leading
// dash as an option.
func CheckVMImage(ref string) error {
	registry, repo, ok := strings.Cut(ref, "/")
	switch {
	case ref == "":
		return errors.New("no image")
	case strings.HasPrefix(ref, "-") || strings.ContainsAny(ref, " \t\n"):
		return fmt.Errorf("%q is not an image reference", ref)
	case !ok || repo == "" || (!strings.ContainsAny(registry, ".:") && registry != "localhost"):
		return fmt.Errorf("%q names no registry: give a full reference such as ghcr.io/cirruslabs/macos-sequoia-base:latest", ref)
	}
	return nil
}
