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
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MacPoolSpec says how many warm machines of a class to keep.
// +kubebuilder:validation:XValidation:rule="!has(self.maxMachines) || !has(self.idle) || self.maxMachines >= self.idle",message="maxMachines must be at least idle"
type MacPoolSpec struct {
	// className is the MacClass of the pool's machines. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="className is immutable; create a new pool for another class"
	// +required
	ClassName string `json:"className"`

	// namespace is where the pool's machines live. Immutable.
	// +kubebuilder:default=macvirt-pools
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="namespace is immutable; create a new pool for another namespace"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// idle is the number of warm, unbound, Ready machines to keep.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Idle *int32 `json:"idle,omitempty"`

	// maxMachines caps every machine of the pool: idle, bound, provisioning
	// and terminating. When unset the cap is twice idle (the warm machines
	// and as many bound ones) and follows idle; status.maxMachines shows the
	// cap in force.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxMachines *int32 `json:"maxMachines,omitempty"`

	// maxProvisioning is the number of machines provisioning at once,
	// which protects storage from a burst of clones.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxProvisioning int32 `json:"maxProvisioning,omitempty"`

	// maxUnhealthy is how many of the pool's unbound machines may look
	// unhealthy at once (Failed, or their guest agent silent past
	// heartbeatTimeout) for the pool to keep replacing them, one
	// provisioning slot at a time. Beyond it the likely cause is shared (the
	// agent endpoint unreachable, a broken image, a host down) and deleting
	// warm Macs would make it worse, so the pool replaces none and reports
	// TooManyUnhealthy until enough recover. A count, or a percentage of the
	// unbound machines rounded up; 50% when unset.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$')",message="maxUnhealthy must be a count >= 0 or a percentage such as 50%"
	// +optional
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`

	// idleState is how the pool keeps its idle machines: Running (default),
	// or Suspended: on Apple-silicon hosts whose tool can suspend (tart on
	// macOS 14 or later), each idle machine boots once, its guest agent
	// reports, and its VM is suspended (memory saved to disk, about the
	// class's memory per machine), holding no licence slot until a claim
	// binds and resumes it. A class on KubeVirt, or a host that cannot
	// suspend, keeps them running, and condition IdleSuspended says so.
	// Changing it replaces the idle machines. Unset means Running: the
	// admission webhook writes it on create, and a pool stored before the
	// field existed reads unchanged.
	// +kubebuilder:validation:Enum=Running;Suspended
	// +optional
	IdleState IdleState `json:"idleState,omitempty"`

	// paused stops the pool from creating or deleting machines.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// MacPoolStatus counts the pool's machines.
type MacPoolStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// machines is every machine of the pool, terminating ones included.
	// +optional
	Machines int32 `json:"machines"`
	// provisioning is the machines not Ready yet.
	// +optional
	Provisioning int32 `json:"provisioning"`
	// idle is the unbound Ready machines.
	// +optional
	Idle int32 `json:"idle"`
	// unhealthy is the unbound machines that are Failed or whose guest
	// agent fell silent; the pool replaces them unless more than
	// maxUnhealthy are.
	// +optional
	Unhealthy int32 `json:"unhealthy"`
	// released is the machines whose claim is gone under reclaimPolicy
	// Retain: stopped, disks kept, never bound again, and outside
	// maxMachines, so a tenant cannot drain the pool by claiming and
	// deleting. An admin deletes them when done.
	// +optional
	Released int32 `json:"released"`
	// suspended is the idle machines whose VM is suspended: they hold no
	// licence slot.
	// +optional
	Suspended int32 `json:"suspended"`
	// bound is the machines bound to a claim.
	// +optional
	Bound int32 `json:"bound"`
	// terminating is the machines being deleted.
	// +optional
	Terminating int32 `json:"terminating"`
	// updatedMachines is the machines rendered from the class's current revision.
	// +optional
	UpdatedMachines int32 `json:"updatedMachines"`
	// maxMachines is the cap in force: spec.maxMachines, or twice idle
	// when that is unset.
	// +optional
	MaxMachines int32 `json:"maxMachines"`
	// conditions: Ready (idle target met), and Stalled when the pool cannot
	// proceed without a human (its class or namespace is missing).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionIdleSuspended is True on a pool whose idleState is Suspended
// while its idle machines can be suspended: False, with reason
// SuspendUnsupported, names what keeps them running (a KubeVirt class, or
// hosts whose tool cannot suspend).
const ConditionIdleSuspended = "IdleSuspended"

// Reasons of a machine or pool that suspends.
const (
	// ReasonSuspendUnsupported: the class's runtime or the hosts cannot
	// suspend a VM; idle machines run.
	ReasonSuspendUnsupported = "SuspendUnsupported"
	// ReasonSuspended: the machine's VM is suspended, Ready to bind.
	ReasonSuspended = "Suspended"
	// ReasonSuspending: the host agent is saving the idle machine's
	// memory; it is not bindable meanwhile.
	ReasonSuspending = "Suspending"
	// ReasonResuming: a bound machine's VM is being resumed, and its guest
	// has not reported with its new identity yet.
	ReasonResuming = "Resuming"
	// ReasonStaleIdentity: a resumed guest reported the SSH host keys it had
	// before it was suspended (its agent did not renew its identity).
	ReasonStaleIdentity = "StaleIdentity"
)

// IdleState is how a pool keeps its idle machines.
type IdleState string

// Idle states.
const (
	// IdleRunning keeps idle machines running.
	IdleRunning IdleState = "Running"
	// IdleSuspended keeps idle machines suspended where the host can.
	IdleSuspended IdleState = "Suspended"
)

// EffectiveMaxMachines is the cap on the pool's machines: maxMachines, or
// twice idle when it is unset, so that a pool that only says "keep N warm"
// can refill after binds until N of its machines are bound.
func (s *MacPoolSpec) EffectiveMaxMachines() int32 {
	if s.MaxMachines != nil {
		return *s.MaxMachines
	}
	return 2 * s.EffectiveIdle()
}

// DefaultPoolMaxUnhealthy is maxUnhealthy when unset.
var DefaultPoolMaxUnhealthy = intstr.FromString("50%")

// EffectiveMaxUnhealthy is how many of unbound machines may be unhealthy
// with replacement going on: maxUnhealthy (or its default) scaled against
// unbound, rounded up. An unparsable value (the schema refuses them) counts
// as zero, which stops replacement rather than risk deleting every machine.
func (s *MacPoolSpec) EffectiveMaxUnhealthy(unbound int32) int32 {
	v := DefaultPoolMaxUnhealthy
	if s.MaxUnhealthy != nil {
		v = *s.MaxUnhealthy
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, int(unbound), true)
	if err != nil || n < 0 {
		return 0
	}
	return int32(min(n, math.MaxInt32))
}

// EffectiveIdle is the idle target: idle, or its default when unset (an
// object the schema did not default, e.g. one built in Go).
func (s *MacPoolSpec) EffectiveIdle() int32 {
	if s.Idle != nil {
		return *s.Idle
	}
	return DefaultPoolIdle
}

// MacPool keeps a number of warm, Ready, unbound machines of one class so
// that claims bind in well under a second. Its machines are named
// <pool>-<slot>, so the name is at most 52 characters.
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: machines are named <pool>-<slot> and carry it in a label"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=mpl,categories=macvirt
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.className`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`,priority=1
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.idle`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.idle`
// +kubebuilder:printcolumn:name="Suspended",type=integer,JSONPath=`.status.suspended`
// +kubebuilder:printcolumn:name="Bound",type=integer,JSONPath=`.status.bound`
// +kubebuilder:printcolumn:name="Released",type=integer,JSONPath=`.status.released`,priority=1
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.unhealthy`,priority=1
// +kubebuilder:printcolumn:name="Machines",type=integer,JSONPath=`.status.machines`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.status.maxMachines`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacPool struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired pool.
	// +required
	Spec MacPoolSpec `json:"spec"`

	// status is the observed pool.
	// +optional
	Status MacPoolStatus `json:"status,omitempty"`
}

// MacPoolList is a list of MacPool.
// +kubebuilder:object:root=true
type MacPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacPool{}, &MacPoolList{})
		return nil
	})
}
