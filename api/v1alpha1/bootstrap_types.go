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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bootstrap is work the guest agent does on a Mac once it is bound to a
// claim: it places the files, then runs the script under /bin/sh as user,
// with the environment, once per binding. docs/bootstrap.md has examples
// and the limits.
// +kubebuilder:validation:XValidation:rule="has(self.script) || (has(self.files) && size(self.files) > 0)",message="a bootstrap needs a script or files; remove spec.bootstrap otherwise"
type Bootstrap struct {
	// script is what runs, under /bin/sh.
	// +optional
	Script *BootstrapScript `json:"script,omitempty"`

	// env are the script's environment variables, besides HOME, USER,
	// LOGNAME, SHELL and PATH, which the agent sets for user.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []BootstrapEnvVar `json:"env,omitempty"`

	// files are placed before the script runs.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=path
	// +optional
	Files []BootstrapFile `json:"files,omitempty"`

	// user runs the script and owns the files it does not give another
	// owner: the login user (admin) when empty. root only where the class
	// allows it (spec.tenancy.allowRootBootstrap); a class's own
	// bootstrap may always run as root.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	// +optional
	User string `json:"user,omitempty"`

	// timeoutSeconds is how long the script may run; then its process
	// group is killed and the bootstrap is TimedOut. Default 1800.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`

	// holdReady keeps the claim from Ready until the bootstrap succeeded
	// (the default); false lets the claim be Ready while it runs, and a
	// failure then shows on BootstrapSucceeded only.
	// +optional
	HoldReady *bool `json:"holdReady,omitempty"`
}

// BootstrapScript is a script's text: inline, or a key of a Secret or a
// ConfigMap in the claim's namespace. Exactly one is set.
// +kubebuilder:validation:XValidation:rule="(has(self.inline) && size(self.inline) > 0 ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) == 1",message="set exactly one of inline, secretKeyRef and configMapKeyRef"
type BootstrapScript struct {
	// inline is the script's text.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	Inline string `json:"inline,omitempty"`
	// secretKeyRef is a key of a Secret in the claim's namespace.
	// +optional
	SecretKeyRef *LocalKeyRef `json:"secretKeyRef,omitempty"`
	// configMapKeyRef is a key of a ConfigMap in the claim's namespace.
	// +optional
	ConfigMapKeyRef *LocalKeyRef `json:"configMapKeyRef,omitempty"`
}

// LocalKeyRef names one key of a Secret or a ConfigMap in the claim's
// namespace.
type LocalKeyRef struct {
	// name of the Secret or ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key in its data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// BootstrapEnvVar is one environment variable: a literal value, or a key
// of a Secret in the claim's namespace (masked in the output the agent
// reports).
// +kubebuilder:validation:XValidation:rule="!(has(self.value) && size(self.value) > 0 && has(self.secretKeyRef))",message="set value or secretKeyRef, not both"
type BootstrapEnvVar struct {
	// name of the variable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`
	// value is a literal value.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Value string `json:"value,omitempty"`
	// secretKeyRef is a key of a Secret in the claim's namespace.
	// +optional
	SecretKeyRef *LocalKeyRef `json:"secretKeyRef,omitempty"`
}

// BootstrapFile is a file the agent places before the script runs, with
// content from a key of a Secret or a ConfigMap in the claim's namespace.
// +kubebuilder:validation:XValidation:rule="(has(self.secretKeyRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) == 1",message="set exactly one of secretKeyRef and configMapKeyRef"
type BootstrapFile struct {
	// path is where the file goes: absolute, without . or .. elements;
	// missing directories are made, owned by owner.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path"`
	// mode is the file's permission bits (0644 when unset; 420 in decimal).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=511
	// +optional
	Mode *int32 `json:"mode,omitempty"`
	// owner is the user who owns the file: the bootstrap's user when empty.
	// root only where the bootstrap may run as root.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	// +optional
	Owner string `json:"owner,omitempty"`
	// secretKeyRef is a key of a Secret in the claim's namespace; the file
	// content is masked in the output the agent reports.
	// +optional
	SecretKeyRef *LocalKeyRef `json:"secretKeyRef,omitempty"`
	// configMapKeyRef is a key of a ConfigMap in the claim's namespace.
	// +optional
	ConfigMapKeyRef *LocalKeyRef `json:"configMapKeyRef,omitempty"`
}

// Limits of a bootstrap, enforced at admission where the values are in the
// object and when the operator reads them from Secrets and ConfigMaps.
const (
	// MaxBootstrapScriptBytes bounds a script.
	MaxBootstrapScriptBytes = 64 << 10
	// MaxBootstrapEnvBytes bounds the names and values of a bootstrap's
	// environment together.
	MaxBootstrapEnvBytes = 64 << 10
	// MaxBootstrapFileBytes bounds the content of a bootstrap's files
	// together.
	MaxBootstrapFileBytes = 512 << 10
)

// DefaultBootstrapTimeout is the timeout of a bootstrap that names none.
const DefaultBootstrapTimeout = 30 * time.Minute

// DefaultBootstrapFileMode is the mode of a file that names none.
const DefaultBootstrapFileMode int32 = 0o644

// BootstrapRootUser is the one user a claim's bootstrap may name only
// where its class allows it.
const BootstrapRootUser = "root"

// TimeoutOrDefault is the bootstrap's timeout.
func (b *Bootstrap) TimeoutOrDefault() time.Duration {
	if b.TimeoutSeconds == nil {
		return DefaultBootstrapTimeout
	}
	return time.Duration(*b.TimeoutSeconds) * time.Second
}

// HoldsReady reports whether the claim is Ready only once the bootstrap
// succeeded.
func (b *Bootstrap) HoldsReady() bool { return b.HoldReady == nil || *b.HoldReady }

// ModeOrDefault is the file's mode.
func (f *BootstrapFile) ModeOrDefault() int32 {
	if f.Mode == nil {
		return DefaultBootstrapFileMode
	}
	return *f.Mode
}

// BootstrapState is where one part of a claim's bootstrap is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;TimedOut
type BootstrapState string

// The states of a bootstrap part.
const (
	// BootstrapPending: not started (the agent has not taken it yet, or an
	// earlier part runs first).
	BootstrapPending BootstrapState = "Pending"
	// BootstrapRunning: the agent runs it.
	BootstrapRunning BootstrapState = "Running"
	// BootstrapSucceeded: it exited 0.
	BootstrapSucceeded BootstrapState = "Succeeded"
	// BootstrapFailed: it exited non-zero, could not start, or was cut off
	// (the Mac restarted under it); it is not run again.
	BootstrapFailed BootstrapState = "Failed"
	// BootstrapTimedOut: it outlived its timeout and its process group was
	// killed.
	BootstrapTimedOut BootstrapState = "TimedOut"
)

// Finished reports whether the state is final.
func (s BootstrapState) Finished() bool {
	return s == BootstrapSucceeded || s == BootstrapFailed || s == BootstrapTimedOut
}

// The parts of a claim's bootstrap, in the order they run.
const (
	// BootstrapPartClass is the class's bootstrap (spec.bootstrap of the
	// MacClass), which runs first.
	BootstrapPartClass = "class"
	// BootstrapPartClaim is the claim's own spec.bootstrap.
	BootstrapPartClaim = "claim"
)

// MaxBootstrapOutputTailBytes bounds the output tail a part reports.
const MaxBootstrapOutputTailBytes = 4096

// MaxBootstrapMessageBytes bounds a part's message.
const MaxBootstrapMessageBytes = 1024

// TaskOutcome is where a task (a part of a bootstrap) is and what it came
// to, as the guest agent reports it.
type TaskOutcome struct {
	// state is where the task is.
	State BootstrapState `json:"state"`
	// exitCode is the script's exit status, once it exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// startedAt is when the agent started it, by the guest's clock.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// duration is how long it ran, once finished.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// outputTail is the end of its output (standard output and error
	// together), at most 4096 bytes, with the values of Secrets masked by
	// the agent. The whole log stays on the Mac (docs/bootstrap.md).
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	OutputTail string `json:"outputTail,omitempty"`
	// message says why it failed when no exit status does, or why the
	// operator could not hand it to the agent yet.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// BootstrapPartStatus is what became of one part of a claim's bootstrap.
type BootstrapPartStatus struct {
	// name is the part: class or claim.
	// +kubebuilder:validation:Enum=class;claim
	Name        string `json:"name"`
	TaskOutcome `json:",inline"`
	// holdReady says the claim is Ready only once this part succeeded.
	// +optional
	HoldReady bool `json:"holdReady,omitempty"`
}

// GuestTaskStatus is one task the guest agent reports: a part of the bound
// claim's bootstrap, by its id (which names the binding), as the agent
// last reported it.
type GuestTaskStatus struct {
	// id is the task's id: the binding and the part.
	// +kubebuilder:validation:MaxLength=128
	ID          string `json:"id"`
	TaskOutcome `json:",inline"`
}

// ConditionBootstrapSucceeded is True on a MacClaim once every part of its
// bootstrap (the class's, the claim's) succeeded on the bound machine;
// absent when there is nothing to run.
const ConditionBootstrapSucceeded = "BootstrapSucceeded"

// Reasons of BootstrapSucceeded, and of Ready while it waits for the
// bootstrap.
const (
	// ReasonBootstrapPending: the agent has not taken the bootstrap yet.
	ReasonBootstrapPending = "BootstrapPending"
	// ReasonBootstrapRunning: the agent runs it.
	ReasonBootstrapRunning = "Running"
	// ReasonBootstrapSucceeded: every part exited 0.
	ReasonBootstrapSucceeded = "Succeeded"
	// ReasonBootstrapFailed: a part exited non-zero or could not run.
	ReasonBootstrapFailed = "Failed"
	// ReasonBootstrapTimedOut: a part outlived its timeout and was killed.
	ReasonBootstrapTimedOut = "TimedOut"
	// ReasonAgentTooOld: the machine's guest agent speaks a protocol before
	// v2 and runs no bootstrap; the golden image needs a newer agent.
	ReasonAgentTooOld = "AgentTooOld"
	// ReasonBootstrapSourceUnavailable: the operator could not read a
	// Secret or ConfigMap the bootstrap names (missing, a key missing, too
	// large, or not granted to the operator in the namespace); it tries
	// again with every heartbeat.
	ReasonBootstrapSourceUnavailable = "SourceUnavailable"
)
