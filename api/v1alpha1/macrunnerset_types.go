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

// MacRunnerSetSpec is a GitHub Actions runner scale set whose runners are
// fresh Macs: one claim per runner, one job per Mac, never reused.
// +kubebuilder:validation:XValidation:rule="(has(self.className) && size(self.className) > 0) != (has(self.poolName) && size(self.poolName) > 0)",message="set exactly one of className and poolName"
// +kubebuilder:validation:XValidation:rule="!has(self.minIdle) || self.minIdle <= self.maxRunners",message="minIdle may not exceed maxRunners"
// +kubebuilder:validation:XValidation:rule="!has(self.poolName) || size(self.poolName) == 0 || !has(self.minIdle) || self.minIdle == 0",message="minIdle moves the warm pool the set owns (className); a pool named by poolName keeps the idle its admin gave it"
type MacRunnerSetSpec struct {
	// github is where the set's runners register and how the operator
	// authenticates there.
	// +required
	GitHub GitHubRunnerTarget `json:"github"`

	// scaleSetName is the scale set's name on GitHub, the label workflows
	// target with runs-on. Defaults to the set's name. Unique within the
	// runner group.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	ScaleSetName string `json:"scaleSetName,omitempty"`

	// labels are extra labels of the scale set besides its name. GitHub.com
	// takes them; GitHub Enterprise Server from 3.18 with the
	// DistributedTask.AllowRunnerScaleSetCustomLabels feature flag (on by
	// default from 3.21), and drops them silently otherwise
	// (docs/github-actions.md).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=64
	Labels []string `json:"labels,omitempty"`

	// className is the class each runner's Mac is claimed from. The set
	// owns a warm pool of it when minIdle is above 0.
	// +optional
	ClassName string `json:"className,omitempty"`

	// poolName is an admin's MacPool each runner's Mac is claimed from,
	// instead of className. Its idle target stays the admin's.
	// +optional
	PoolName string `json:"poolName,omitempty"`

	// maxRunners caps the set's runners that may take a job (waiting for
	// or booting a Mac, idle, or running a job). A runner whose job ended
	// does not count while its Mac stops gracefully: at most twice
	// maxRunners claims exist, and the set's own pool holds at most twice
	// maxRunners Macs, those stopping included; licence slots bound what runs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=500
	MaxRunners int32 `json:"maxRunners"`

	// minIdle is the least number of warm, unbound Macs the set's own pool
	// keeps while no job waits (className only). The pool grows above it
	// with waiting jobs, up to the set's headroom under maxRunners.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinIdle int32 `json:"minIdle,omitempty"`

	// jobTimeout is the longest a job may run on a Mac: past it the Mac is
	// released (stopped gracefully) and its runner removed from GitHub.
	// Defaults to 6h.
	// +optional
	JobTimeout *metav1.Duration `json:"jobTimeout,omitempty"`

	// registrationTimeout is the longest a runner may take from its claim
	// to taking a job or coming online; past it the runner is removed from
	// GitHub and its Mac released. Defaults to 15m.
	// +optional
	RegistrationTimeout *metav1.Duration `json:"registrationTimeout,omitempty"`

	// runner says where the golden image keeps GitHub's runner and which
	// macOS account runs it.
	// +optional
	Runner RunnerInstall `json:"runner,omitempty"`
}

// GitHubRunnerTarget is a GitHub organisation or repository, on GitHub.com
// or GitHub Enterprise Server, and the credentials the operator uses there.
type GitHubRunnerTarget struct {
	// url is the organisation (https://github.com/my-org) or repository
	// (https://github.com/my-org/my-repo) the runners register with; a
	// GitHub Enterprise Server host works the same way.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	URL string `json:"url"`

	// runnerGroup is the runner group of the scale set. Defaults to the
	// default group.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	RunnerGroup string `json:"runnerGroup,omitempty"`

	// credentialsSecretName is a Secret in the set's namespace holding
	// either a GitHub App's app-id, installation-id and private-key, or a
	// fine-grained token under token. The operator reads it as it reads
	// bootstrap sources (docs/github-actions.md).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecretName string `json:"credentialsSecretName"`
}

// RunnerInstall is where GitHub's runner lives on the Mac.
type RunnerInstall struct {
	// user is the macOS account that runs the runner. Defaults to the
	// bootstrap's default account (docs/bootstrap.md).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	User string `json:"user,omitempty"`

	// directory holds GitHub's runner (its run.sh): an absolute path, or a
	// path under the user's home. Defaults to actions-runner.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Directory string `json:"directory,omitempty"`
}

// Keys of a runner set's credentials Secret.
const (
	GitHubAppIDKey          = "app-id"
	GitHubInstallationIDKey = "installation-id"
	GitHubPrivateKeyKey     = "private-key"
	GitHubTokenKey          = "token"
)

// Defaults of a runner set.
const (
	DefaultRunnerJobTimeout          = 6 * time.Hour
	DefaultRunnerRegistrationTimeout = 15 * time.Minute
	DefaultRunnerDirectory           = "actions-runner"
)

// EffectiveScaleSetName is the scale set's name on GitHub.
func (s *MacRunnerSet) EffectiveScaleSetName() string {
	if s.Spec.ScaleSetName != "" {
		return s.Spec.ScaleSetName
	}
	return s.Name
}

// EffectiveJobTimeout is jobTimeout or its default.
func (s *MacRunnerSetSpec) EffectiveJobTimeout() time.Duration {
	if s.JobTimeout == nil || s.JobTimeout.Duration <= 0 {
		return DefaultRunnerJobTimeout
	}
	return s.JobTimeout.Duration
}

// EffectiveRegistrationTimeout is registrationTimeout or its default.
func (s *MacRunnerSetSpec) EffectiveRegistrationTimeout() time.Duration {
	if s.RegistrationTimeout == nil || s.RegistrationTimeout.Duration <= 0 {
		return DefaultRunnerRegistrationTimeout
	}
	return s.RegistrationTimeout.Duration
}

// RunnerState is where one runner of a set is.
type RunnerState string

const (
	// RunnerProvisioning is a runner whose Mac is being claimed or booting, or GitHub's
	// runner has not come online yet.
	RunnerProvisioning RunnerState = "Provisioning"
	// RunnerIdle is a runner online and waiting for a job.
	RunnerIdle RunnerState = "Idle"
	// RunnerRunning is a runner that took a job.
	RunnerRunning RunnerState = "Running"
	// RunnerFinishing is a runner whose job ended or that was cleaned up; its Mac is being
	// released and its registration removed.
	RunnerFinishing RunnerState = "Finishing"
)

// RunnerStatus is one runner of a set: its claim, its registration and its
// job.
type RunnerStatus struct {
	// name is the runner's name on GitHub, and its claim's.
	Name string `json:"name"`
	// state is where the runner is.
	State RunnerState `json:"state"`
	// since is when the runner entered its state.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// job is the job it runs, once GitHub said so.
	// +optional
	Job *RunnerJob `json:"job,omitempty"`
	// message says why a Finishing runner finishes, or what a Provisioning
	// one waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// RunnerJob is a GitHub Actions job a runner took.
type RunnerJob struct {
	// id is GitHub's job id.
	ID string `json:"id"`
	// repository is owner/name of the job's repository.
	// +optional
	Repository string `json:"repository,omitempty"`
	// displayName is the job's name in the workflow.
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// workflowRunID is the run the job belongs to.
	// +optional
	WorkflowRunID int64 `json:"workflowRunID,omitempty"`
	// startedAt is when the runner took the job.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
}

// MacRunnerSetStatus is what the set's scale set asks for and what its Macs
// do.
type MacRunnerSetStatus struct {
	// FleetStatus is what every CI fleet's status says: observedGeneration,
	// desired, pending, running, the warm pool and the conditions.
	FleetStatus `json:",inline"`
	// scaleSetID is the scale set's id on GitHub.
	// +optional
	ScaleSetID int64 `json:"scaleSetID,omitempty"`
	// messageSessionID is the scale set's message session the set's
	// listener opened last. GitHub keeps one session per scale set and
	// refuses another until an unclosed one expires, so an operator that
	// starts after one was killed closes this one (it is the set's own)
	// instead of waiting.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MessageSessionID string `json:"messageSessionID,omitempty"`
	// assignedJobs is GitHub's count of jobs assigned to the scale set,
	// waiting or running; while GitHub is not heard (an outage, or a
	// session another listener holds), the jobs of that count whose
	// runners have not ended, which the set works from.
	// +optional
	AssignedJobs int32 `json:"assignedJobs"`
	// runners counts the set's runners, in every state.
	// +optional
	Runners int32 `json:"runners"`
	// idle counts runners online without a job.
	// +optional
	Idle int32 `json:"idle"`
	// runnerStatuses are the set's runners, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	RunnerStatuses []RunnerStatus `json:"runnerStatuses,omitempty"`
	// lastGitHubError is the last error GitHub answered; cleared once the
	// set's listener is back in session.
	// +optional
	LastGitHubError *ServiceError `json:"lastGitHubError,omitempty"`
}

// MacRunnerSet runs GitHub Actions jobs on fresh Macs: a runner scale set on
// GitHub whose every runner is a MacClaim, released after one job.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mrs,categories=macvirt
// +kubebuilder:printcolumn:name="Scale Set",type=string,JSONPath=`.status.scaleSetID`,priority=1
// +kubebuilder:printcolumn:name="Jobs",type=integer,JSONPath=`.status.assignedJobs`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desired`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Idle",type=integer,JSONPath=`.status.idle`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxRunners`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MacRunnerSet struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired runner set.
	// +required
	Spec MacRunnerSetSpec `json:"spec"`

	// status is the observed runner set.
	// +optional
	Status MacRunnerSetStatus `json:"status,omitempty"`
}

// MacRunnerSetList is a list of MacRunnerSet.
// +kubebuilder:object:root=true
type MacRunnerSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MacRunnerSet `json:"items"`
}

// Labels and annotations of what a runner set makes.
const (
	// LabelRunnerSet carries, on a runner's claim and JIT Secret and on the
	// set's warm pool, the name of the MacRunnerSet it belongs to.
	LabelRunnerSet = "macvirt.io/runner-set"
	// LabelRunnerSetNamespace carries the set's namespace on its warm pool,
	// which is cluster-scoped.
	LabelRunnerSetNamespace = "macvirt.io/runner-set-namespace"
	// AnnotationRunnerJob records on a runner's claim the job GitHub gave
	// it (JSON of RunnerJob), so a restarted operator knows it.
	AnnotationRunnerJob = "macvirt.io/runner-job"
	// RunnerJITConfigKey is the key of a runner's JIT Secret.
	RunnerJITConfigKey = "jitconfig"
	// RunnerJITConfigEnv is the variable the runner's task reads it from.
	RunnerJITConfigEnv = "ACTIONS_RUNNER_JITCONFIG"
)

// Conditions and reasons of a runner set.
const (
	ReasonListening          = "Listening"
	ReasonCredentialsInvalid = "CredentialsInvalid"
	ReasonInvalidGitHubURL   = "InvalidGitHubURL"
	ReasonScaleSetInUse      = "ScaleSetInUse"
	ReasonConnecting         = "Connecting"
	ReasonGitHubUnavailable  = "GitHubUnavailable"
	ReasonRateLimited        = "RateLimited"
	ReasonSessionConflict    = "SessionConflict"
	ReasonClassUnavailable   = "ClassUnavailable"
	ReasonRunnerCleanup      = "RunnerCleanupFailed"
	ReasonAtMaxRunners       = "AtMaxRunners"
)

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &MacRunnerSet{}, &MacRunnerSetList{})
		return nil
	})
}
