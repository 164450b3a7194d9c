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
)

// FleetStatus is the part of a CI fleet's status (a MacRunnerSet's, a
// MacBuildkiteQueue's) that every fleet kind says the same way. Each
// kind's status embeds it inline, so its fields stay where they were in
// the API, and one status computation and one status write serve every
// kind. What a kind counts in its own words (GitHub's assigned jobs, a
// queue's agents) stays in its own status.
type FleetStatus struct {
	// observedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// desired is how many runners (a queue's agents) are wanted: the jobs
	// that want a Mac (assignedJobs, jobs), up to maxRunners (maxAgents).
	// +optional
	Desired int32 `json:"desired"`
	// pending counts runners (agents) on their way: their Mac boots, their
	// runner is not online yet, or their agent waits for its job.
	// +optional
	Pending int32 `json:"pending"`
	// running counts runners (agents) running a job.
	// +optional
	Running int32 `json:"running"`
	// warmPoolName is the set's or queue's own MacPool (className and
	// minIdle).
	// +optional
	WarmPoolName string `json:"warmPoolName,omitempty"`
	// warmIdle is the idle target the set or queue gave its pool.
	// +optional
	WarmIdle int32 `json:"warmIdle,omitempty"`
	// conditions: Ready (registered with the CI service and serving its
	// jobs, a set's scale set listening or a queue's stack polling, and no
	// cleanup failed), Stalled (a human is needed).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceError is the last error a fleet's CI service (GitHub, Buildkite)
// answered, in its own words: one type, so that every fleet kind reports
// it, and warns of it, the same way.
type ServiceError struct {
	// time is when it answered so.
	Time metav1.Time `json:"time"`
	// statusCode is the HTTP status, when there was an answer.
	// +optional
	StatusCode int32 `json:"statusCode,omitempty"`
	// message is the error, with the service's own message.
	Message string `json:"message"`
	// rateLimitReset is when the service's rate limit resets, when it was
	// the cause.
	// +optional
	RateLimitReset *metav1.Time `json:"rateLimitReset,omitempty"`
}

// Fleet is the part of the set's status every fleet kind shares, for the
// fleets' one status write.
func (s *MacRunnerSet) Fleet() *FleetStatus { return &s.Status.FleetStatus }

// LastServiceError is the set's lastGitHubError, for the fleets' one
// status write.
func (s *MacRunnerSet) LastServiceError() *ServiceError { return s.Status.LastGitHubError }

// Fleet is the part of the queue's status every fleet kind shares, for the
// fleets' one status write.
func (q *MacBuildkiteQueue) Fleet() *FleetStatus { return &q.Status.FleetStatus }

// LastServiceError is the queue's lastBuildkiteError, for the fleets' one
// status write.
func (q *MacBuildkiteQueue) LastServiceError() *ServiceError { return q.Status.LastBuildkiteError }
