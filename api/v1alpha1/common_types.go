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
	"k8s.io/apimachinery/pkg/types"
)

// Condition types shared by the macvirt kinds. Conditions are the API;
// status.phase is a summary for humans.
const (
	// ConditionReady is the summary condition of every kind: True when the
	// object does what it was asked to do (a class is usable, a pool holds
	// its idle target, a claim's machine is Ready, a machine's guest answers).
	ConditionReady = "Ready"

	// ConditionStalled is True when progress needs a human: a permission is
	// missing, an input is invalid, or a graceful stop cannot be requested.
	ConditionStalled = "Stalled"

	// ConditionDisksReady is True on a MacMachine when its system and
	// bootloader DataVolumes have succeeded.
	ConditionDisksReady = "DisksReady"

	// ConditionVMRunning is True on a MacMachine when its
	// VirtualMachineInstance is Running.
	ConditionVMRunning = "VMRunning"

	// ConditionGuestAgentReady is True on a MacMachine when the guest agent
	// inside macOS has sent a heartbeat within the class heartbeatTimeout.
	ConditionGuestAgentReady = "GuestAgentReady"

	// ConditionBound is True on a MacClaim once a MacMachine is bound to it.
	ConditionBound = "Bound"
	// ConditionConnectionSecretReady is True on a claim once its connection
	// Secret holds the connection; False, with reason SecretConflict, when a
	// Secret of that name exists that the claim does not control (it is
	// never written then).
	ConditionConnectionSecretReady = "ConnectionSecretReady"
	// ConditionServiceReady is True on a claim once its Service routes to
	// its machine.
	ConditionServiceReady = "ServiceReady"

	// ConditionClassUpToDate is True on a MacMachine while its MacClass exists
	// at the revision the machine records in spec.classRevision. False (reason
	// ClassNotFound or ClassChanged) is informational: the machine keeps
	// running from the operator's snapshot of its recorded revision, and Ready
	// does not depend on it.
	ConditionClassUpToDate = "ClassUpToDate"
)

// Condition reasons. Each one names the observation behind a condition.
const (
	// ReasonAsExpected is the reason of a condition in its healthy state.
	ReasonAsExpected = "AsExpected"
	// ReasonPending means nothing has been requested yet.
	ReasonPending = "Pending"
	// ReasonProvisioning means the machine's DataVolumes are importing or cloning.
	ReasonProvisioning = "Provisioning"
	// ReasonDataVolumeFailed means CDI reported a DataVolume as Failed.
	ReasonDataVolumeFailed = "DataVolumeFailed"
	// ReasonStarting means the VirtualMachine should run but its VMI is not Running yet.
	ReasonStarting = "Starting"
	// ReasonUnschedulable means KubeVirt reports the VMI cannot be scheduled.
	ReasonUnschedulable = "Unschedulable"
	// ReasonCrashLoop means KubeVirt reports the VM as crash-looping.
	ReasonCrashLoop = "CrashLoopBackOff"
	// ReasonBooting means the VMI runs and the first guest-agent heartbeat is awaited.
	ReasonBooting = "Booting"
	// ReasonBootTimeout means no heartbeat arrived within the class bootTimeout.
	ReasonBootTimeout = "BootTimeout"
	// ReasonHeartbeatStale means the last heartbeat is older than heartbeatTimeout.
	ReasonHeartbeatStale = "HeartbeatStale"
	// ReasonStopping means a graceful stop was requested and the VMI still runs.
	ReasonStopping = "Stopping"
	// ReasonStopped means spec.running is false and the VMI is gone; disks are kept.
	ReasonStopped = "Stopped"
	// ReasonStopFailed means the stop subresource call failed; the VM is left running.
	ReasonStopFailed = "StopFailed"
	// ReasonDeleting means the object is being deleted.
	ReasonDeleting = "Deleting"
	// ReasonClassNotFound means the referenced MacClass does not exist.
	ReasonClassNotFound = "ClassNotFound"
	// ReasonClassChanged means the MacClass now has another revision than the
	// one a machine was rendered from.
	ReasonClassChanged = "ClassChanged"
	// ReasonInvalidClass means the class cannot be rendered into a VirtualMachine.
	ReasonInvalidClass = "InvalidClass"
	// ReasonDomainHookNotReady means the machine's VM is neither created nor
	// started while the operator's domain-hook transport is not in place
	// (KubeVirt's Plugins gate off, the Plugin not written): macOS would
	// start without its settings.
	ReasonDomainHookNotReady = "DomainHookNotReady"
	// ReasonSecretUnavailable means a Secret the class references cannot be read.
	ReasonSecretUnavailable = "SecretUnavailable"
	// ReasonMachineLost means a claim's bound machine failed or disappeared.
	ReasonMachineLost = "MachineLost"
	// ReasonLifetimeExpired means a claim's lifetime is over: its machine
	// is given back and it is never bound again.
	ReasonLifetimeExpired = "LifetimeExpired"
	// ReasonNamespaceNotAllowed means the class tenancy excludes the claim's namespace.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonPoolNotFound means the referenced MacPool does not exist.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonClassMismatch means a claim names a class and a pool of another class.
	ReasonClassMismatch = "ClassMismatch"
	// ReasonWaitingForMachine means no idle machine is available yet.
	ReasonWaitingForMachine = "WaitingForMachine"
	// ReasonBound means the claim is bound to a machine.
	ReasonBound = "Bound"
	// ReasonBinding means the claim has reserved a machine (its status
	// names it) and the machine's side of the binding is being written.
	ReasonBinding = "Binding"
	// ReasonSecretConflict means a Secret of the connection Secret's name
	// exists and is not controlled by the claim.
	ReasonSecretConflict = "SecretConflict"
	// ReasonConnectionSecretStale means the claim's connection Secret holds
	// an earlier connection; the operator only creates Secrets, so the
	// tenant deletes it to have it written again.
	ReasonConnectionSecretStale = "ConnectionSecretStale"
	// ReasonMachineNotReady means the bound machine is not Ready yet.
	ReasonMachineNotReady = "MachineNotReady"
	// ReasonWaitingForNetworkPolicy means a claim's machine is Ready but its
	// NetworkPolicy does not let the claim's namespace in yet.
	ReasonWaitingForNetworkPolicy = "WaitingForNetworkPolicy"
	// ReasonServiceConflict means a Service or EndpointSlice of the name a
	// claim's would have exists and is not controlled by the claim.
	ReasonServiceConflict = "ServiceConflict"
	// ReasonNodeUnreadable means the Node a NodePort claim's machine runs
	// on could not be read, so the claim's external address is unknown;
	// the API server's words are in the message.
	ReasonNodeUnreadable = "NodeUnreadable"
	// ReasonAccessTypeNotAllowed means the claim asks for an access type its
	// class does not allow; its Service is ClusterIP.
	ReasonAccessTypeNotAllowed = "AccessTypeNotAllowed"
	// ReasonGuestConfigFailed means the bound machine's guest agent could
	// not apply the claim's SSH keys (or the machine's hostname); its words
	// are in the message, and a human must fix the guest or its image.
	ReasonGuestConfigFailed = "GuestConfigFailed"
	// ReasonIdleTargetNotMet means a pool holds fewer idle machines than asked.
	ReasonIdleTargetNotMet = "IdleTargetNotMet"
	// ReasonCreateFailed means the API server refused to create an object
	// the operator needs (a quota, an admission webhook or policy, a
	// webhook that is down); the message is the API server's.
	ReasonCreateFailed = "CreateFailed"
	// ReasonUpdateFailed means the API server refused an update the
	// operator needed (binding a machine, recording its identity), other
	// than a conflict; the message is the API server's.
	ReasonUpdateFailed = "UpdateFailed"
	// ReasonDeleteFailed means the API server refused a delete the
	// operator needed; the message is the API server's.
	ReasonDeleteFailed = "DeleteFailed"
	// ReasonRetainNotAllowed means a claim asks for reclaimPolicy Retain
	// and its class's tenancy.allowRetain is false.
	ReasonRetainNotAllowed = "RetainNotAllowed"
	// ReasonTooManyReleased means a claim asks for reclaimPolicy Retain and
	// its namespace already holds the class's maxReleasedPerNamespace
	// released machines.
	ReasonTooManyReleased = "TooManyReleased"
	// ReasonTooManyUnhealthy means more of a pool's unbound machines look
	// unhealthy than its maxUnhealthy allows, so it replaces none of them.
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
	// ReasonNamespaceMissing means the pool's namespace does not exist.
	ReasonNamespaceMissing = "NamespaceMissing"
	// ReasonDataSourceMissing means a class references a DataSource that does not exist.
	ReasonDataSourceMissing = "DataSourceMissing"
)

// Labels and annotations put on every object macvirt creates.
const (
	// LabelMachine carries the name of the MacMachine an object belongs to.
	LabelMachine = "macvirt.io/machine"
	// LabelClass carries the name of the MacClass an object was rendered from.
	LabelClass = "macvirt.io/class"
	// LabelClassRevision carries, on a class snapshot (a ControllerRevision in
	// the operator's namespace), the class revision it holds.
	LabelClassRevision = "macvirt.io/class-revision"
	// LabelPool carries the name of the MacPool a machine belongs to, if any.
	LabelPool = "macvirt.io/pool"
	// LabelClaim carries, on a claim's Service and EndpointSlice, the
	// claim's name; the operator caches only Services and EndpointSlices
	// that carry it.
	LabelClaim = "macvirt.io/claim"
	// AnnotationDomainHook holds the versioned JSON configuration read by the
	// domain-hook sidecar, on the VirtualMachine's template.
	AnnotationDomainHook = "macvirt.io/domain-hook"
	// LabelReleased marks a machine whose claim is gone under the Retain
	// policy; it is kept for a human and never bound again.
	LabelReleased = "macvirt.io/released"
	// AnnotationReclaimPolicy records, on a bound machine, its claim's
	// reclaimPolicy, so the machine can be released as the claim asked even
	// after the claim is gone (as a PersistentVolume carries its policy).
	AnnotationReclaimPolicy = "macvirt.io/reclaim-policy"
	// AnnotationAgentTokenHash records, on a MacMachine, the hex SHA-256 of
	// its guest agent's token (the token itself is only in the machine's
	// agent Secret), so the operator authenticates heartbeats without
	// reading Secrets.
	AnnotationAgentTokenHash = "macvirt.io/agent-token-sha256" //nolint:gosec // the name of an annotation, not a credential.
	// AnnotationAgentSecret names, on a MacMachine, the agent Secret that
	// holds the token whose hash AnnotationAgentTokenHash records; the
	// machine's VM mounts that Secret as the agent's config disk. Both are
	// recorded in one write, and a recorded Secret is never written again.
	AnnotationAgentSecret = "macvirt.io/agent-secret" //nolint:gosec // the name of an annotation, not a credential.
	// MachineFinalizer guards a MacMachine until its VM is stopped gracefully
	// and its VirtualMachine and DataVolumes are deleted.
	MachineFinalizer = "macvirt.io/machine-protection"
)

// ObjectRef names an object by namespace and name and pins it to one
// incarnation by UID, so a recreated object with the same name never
// inherits a binding.
// +kubebuilder:validation:XValidation:rule="size(self.uid) > 0",message="uid must not be empty"
type ObjectRef struct {
	// namespace of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the referenced object; a recreated object has another UID.
	UID types.UID `json:"uid"`
}

// SecretKeyRef selects one key of a Secret in a given namespace.
type SecretKeyRef struct {
	// namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key inside the Secret's data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}
