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
	"k8s.io/apimachinery/pkg/runtime"
)

// MacBuildkiteQueueSpec runs the jobs of a Buildkite cluster queue on fresh
// Macs: macvirt is a custom stack on the queue that reserves each job,
// claims a Mac for it, and starts `buildkite-agent start --acquire-job` there
// with a short-lived job acquisition token; the Mac is released after the
// one job.
// +kubebuilder:validation:XValidation:rule="(has(self.className) && size(self.className) > 0) != (has(self.poolName) && size(self.poolName) > 0)",message="set exactly one of className and poolName"
// +kubebuilder:validation:XValidation:rule="!has(self.minIdle) || self.minIdle <= self.maxAgents",message="minIdle may not exceed maxAgents"
// +kubebuilder:validation:XValidation:rule="!has(self.poolName) || size(self.poolName) == 0 || !has(self.minIdle) || self.minIdle == 0",message="minIdle moves the warm pool the queue owns (className); a pool named by poolName keeps the idle its admin gave it"
// +kubebuilder:validation:XValidation:rule="!has(self.jobTokenTTL) || (duration(self.jobTokenTTL) >= duration('1m') && duration(self.jobTokenTTL) <= duration('1h'))",message="jobTokenTTL must be between 1m and 1h (Buildkite issues job acquisition tokens for at most an hour)"
type MacBuildkiteQueueSpec struct {
	// buildkite is the cluster queue and the agent token macvirt's stack
	// uses there.
	// +required
	Buildkite BuildkiteTarget `json:"buildkite"`

	// className is the class each agent's Mac is claimed from. The queue
	// owns a warm pool of it when minIdle is above 0.
	// +optional
	ClassName string `json:"className,omitempty"`

	// poolName is an admin's MacPool each agent's Mac is claimed from,
	// instead of className. Its idle target stays the admin's.
	// +optional
	PoolName string `json:"poolName,omitempty"`

	// maxAgents caps the queue's agents that may take a job (waiting for
	// or booting a Mac, or running a job). An agent whose job ended does
	// not count while its Mac stops gracefully: at most twice maxAgents
	// claims exist, and the queue's own pool holds at most twice maxAgents
	// Macs, those stopping included; licence slots bound what runs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=500
	MaxAgents int32 `json:"maxAgents"`

	// minIdle is the least number of warm, unbound Macs the queue's own
	// pool keeps while no job waits (className only).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinIdle int32 `json:"minIdle,omitempty"`

	// jobTimeout is the longest a job may hold its Mac: past it the Mac is
	// released (stopped gracefully). Defaults to 6h.
	// +optional
	JobTimeout *metav1.Duration `json:"jobTimeout,omitempty"`

	// startTimeout is the longest an agent may take from its claim to being
	// handed a job; past it its Mac is released. Defaults to 15m.
	// +optional
	StartTimeout *metav1.Duration `json:"startTimeout,omitempty"`

	// jobTokenTTL is how long a job acquisition token lives: it is issued
	// once the agent's Mac is Ready, and the job's reservation lasts as
	// long. Defaults to 15m; at most 1h.
	// +optional
	JobTokenTTL *metav1.Duration `json:"jobTokenTTL,omitempty"`

	// agent says where the golden image keeps buildkite-agent and which
	// macOS account runs it.
	// +optional
	Agent BuildkiteAgentInstall `json:"agent,omitempty"`
}

// BuildkiteTarget is a Buildkite cluster queue and the cluster agent token
// macvirt's stack uses there.
type BuildkiteTarget struct {
	// queue is the cluster queue's key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Queue string `json:"queue"`

	// tokenSecretName is a Secret in the queue's namespace holding a
	// cluster agent token of the queue's cluster under token. The operator
	// reads it as it reads bootstrap sources; it never reaches a Mac
	// (docs/buildkite.md).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	TokenSecretName string `json:"tokenSecretName"`

	// endpoint is Buildkite's agent API. Defaults to
	// https://agent.buildkite.com/v3.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`
}

// BuildkiteAgentInstall is where buildkite-agent lives on the Mac.
type BuildkiteAgentInstall struct {
	// user is the macOS account that runs the agent. Defaults to the
	// bootstrap's default account (docs/bootstrap.md).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	User string `json:"user,omitempty"`

	// path is buildkite-agent on the Mac: an absolute path, a path under
	// the account's home (bin/buildkite-agent), or a command found on the
	// account's PATH. Defaults to buildkite-agent.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Path string `json:"path,omitempty"`
}

// Keys, labels and defaults of a Buildkite queue.
const (
	// BuildkiteTokenKey is the key of the token Secret.
	BuildkiteTokenKey = "token"
	// LabelBuildkiteQueue carries, on an agent's claim and job Secret and
	// on the queue's warm pool, the name of the MacBuildkiteQueue.
	LabelBuildkiteQueue = "macvirt.io/buildkite-queue"
	// LabelBuildkiteQueueNamespace carries the queue's namespace on its
	// warm pool, which is cluster-scoped.
	LabelBuildkiteQueueNamespace = "macvirt.io/buildkite-queue-namespace"
	// AnnotationBuildkiteJob records on an agent's claim the job it was
	// handed (JSON of RunnerJob), so a restarted operator knows it.
	AnnotationBuildkiteJob = "macvirt.io/buildkite-job"
	// BuildkiteJobKey and BuildkiteJobTokenKey are the keys of an agent's
	// job Secret: the job's id and its job acquisition token.
	BuildkiteJobKey      = "job"
	BuildkiteJobTokenKey = "job-token"
	// DefaultBuildkiteJobTokenTTL is a job acquisition token's life.
	DefaultBuildkiteJobTokenTTL = 15 * time.Minute
	// DefaultBuildkiteAgentPath is buildkite-agent on the account's PATH.
	DefaultBuildkiteAgentPath = "buildkite-agent"
)

// Reasons of a Buildkite queue's Ready condition (with the runner sets'
// ReasonCredentialsInvalid, ReasonClassUnavailable, ReasonRunnerCleanup).
const (
	ReasonPolling              = "Polling"
	ReasonConnectingBuildkite  = "ConnectingToBuildkite"
	ReasonBuildkiteUnavailable = "BuildkiteUnavailable"
	ReasonAtMaxAgents          = "AtMaxAgents"
)

// EffectiveJobTimeout is jobTimeout or its default.
func (s *MacBuildkiteQueueSpec) EffectiveJobTimeout() time.Duration {
	if s.JobTimeout == nil || s.JobTimeout.Duration <= 0 {
		return DefaultRunnerJobTimeout
	}
	return s.JobTimeout.Duration
}

// EffectiveStartTimeout is startTimeout or its default.
func (s *MacBuildkiteQueueSpec) EffectiveStartTimeout() time.Duration {
	if s.StartTimeout == nil || s.StartTimeout.Duration <= 0 {
		return DefaultRunnerRegistrationTimeout
	}
	return s.StartTimeout.Duration
}

// EffectiveJobTokenTTL is jobTokenTTL or its default.
func (s *MacBuildkiteQueueSpec) EffectiveJobTokenTTL() time.Duration {
	if s.JobTokenTTL == nil || s.JobTokenTTL.Duration <= 0 {
		return DefaultBuildkiteJobTokenTTL
	}
	return s.JobTokenTTL.Duration
}

// MacBuildkiteQueueStatus is what the queue asks for and what its Macs do.
type MacBuildkiteQueueStatus struct {
	// FleetStatus is what every CI fleet's status says: observedGeneration,
	// desired, pending, running, the warm pool and the conditions.
	FleetStatus `json:",inline"`
	// stackKey is the key of macvirt's stack on the queue, once it was
	// registered there.
	// +optional
	StackKey string `json:"stackKey,omitempty"`
	// jobs counts the queue's jobs that want a Mac: scheduled, or handed
	// to an agent of this queue and not ended.
	// +optional
	Jobs int32 `json:"jobs"`
	// agents counts the queue's agents, in every state.
	// +optional
	Agents int32 `json:"agents"`
	// agentStatuses are the queue's agents, by name (their claims').
	// +optional
	// +listType=map
	// +listMapKey=name
	AgentStatuses []RunnerStatus `json:"agentStatuses,omitempty"`
	// lastBuildkiteError is the last error Buildkite answered; cleared
	// once a poll succeeds again.
	// +optional
	LastBuildkiteError *ServiceError `json:"lastBuildkiteError,omitempty"`
}

// MacBuildkiteQueue runs a Buildkite cluster queue's jobs on fresh Macs: one
// MacClaim per job, released after it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mbq,categories=macvirt
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.buildkite.queue`
// +kubebuilder:printcolumn:name="Jobs",type=integer,JSONPath=`.status.jobs`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxAgents`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacBuildkiteQueue struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired queue.
	// +required
	Spec MacBuildkiteQueueSpec `json:"spec"`

	// status is the observed queue.
	// +optional
	Status MacBuildkiteQueueStatus `json:"status,omitempty"`
}

// MacBuildkiteQueueList is a list of MacBuildkiteQueue.
// +kubebuilder:object:root=true
type MacBuildkiteQueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacBuildkiteQueue `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacBuildkiteQueue{}, &MacBuildkiteQueueList{})
		return nil
	})
}
