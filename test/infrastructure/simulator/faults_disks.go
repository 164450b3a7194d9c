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

package simulator

import (
	"fmt"
	"time"
)

const (
	// DataVolumeQuotaExceeded makes the API server refuse the PVC of a
	// DataVolume for a storage ResourceQuota: the DataVolume stays Pending
	// with Bound=False (reason ErrExceededQuota) while the fault is on, and
	// continues once it is cleared, as CDI retries creating the PVC
	// (pkg/controller/datavolume/controller-base.go, handlePvcCreation).
	DataVolumeQuotaExceeded FaultKind = "DataVolumeQuotaExceeded"
	// ImporterUnschedulable keeps a DataVolume's importer (or clone) pod
	// unscheduled: the DataVolume stays ImportScheduled/CloneScheduled with
	// Running=False (reason Unschedulable, "Importer pod cannot be
	// scheduled") while the fault is on (pkg/controller/datavolume/
	// conditions.go, updateRunningCondition).
	ImporterUnschedulable FaultKind = "ImporterUnschedulable"
)

// dataVolumeFaultKinds are the faults that act on a DataVolume, by name.
var dataVolumeFaultKinds = map[FaultKind]bool{
	DataVolumeFailed:          true,
	DataVolumeQuotaExceeded:   true,
	ImporterUnschedulable:     true,
	DataVolumeProgressUnknown: true,
}

// dvFaults is what holds back or breaks one DataVolume at its next step.
type dvFaults struct {
	// failed: the importer or clone pod exits with an error and is
	// restarted (RestartPolicyOnFailure).
	failed bool
	// quota: the PVC is refused for a ResourceQuota.
	quota bool
	// unschedulable: the importer pod finds no node.
	unschedulable bool
	// waitForConsumer: the storage class binds on first consumer, no
	// consumer exists and immediate binding was not requested.
	waitForConsumer bool
	// clone is the clone's plan (not a fault, but it decides a clone's
	// phases the same way).
	clone clonePlan
	// waitForSource: the clone's source is not ready: a VolumeSnapshot not
	// readyToUse, or a PVC not populated or in use.
	waitForSource bool
}

func (s *Simulator) dataVolumeFaults(namespace, name string) dvFaults {
	return dvFaults{
		failed:        s.hasFault(DataVolumeFailed, namespace, name),
		quota:         s.hasFault(DataVolumeQuotaExceeded, namespace, name),
		unschedulable: s.hasFault(ImporterUnschedulable, namespace, name),
	}
}

// Messages CDI and the API server write for the simulated disk faults.
const (
	reasonExceededQuota = "ErrExceededQuota"   // pkg/controller/common/util.go, ErrExceededQuota
	reasonUnschedulable = "Unschedulable"      // pkg/controller/datavolume/conditions.go
	reasonCloneNoSource = "CloneWithoutSource" // pkg/controller/datavolume/clone-controller-base.go
	reasonCloneInvalid  = "CloneValidationFailed"
	msgUnschedulable    = "Importer pod cannot be scheduled"
	msgCloneNoSource    = "The source %s %s doesn't exist"                         // MessageCloneWithoutSource
	msgCloneInvalid     = "The clone doesn't meet the validation requirements: %s" // MessageCloneValidationFailed
)

// quotaMessage is the API server's refusal of a PVC for a ResourceQuota, as
// CDI copies it into the Bound condition.
func quotaMessage(claim string) string {
	return fmt.Sprintf(`persistentvolumeclaims %q is forbidden: exceeded quota: storage, requested: requests.storage=64Gi, used: requests.storage=448Gi, limited: requests.storage=500Gi (simulated fault %s)`,
		claim, DataVolumeQuotaExceeded)
}

// restartBackoff is the wait before a failed importer pod runs again: the
// kubelet's CrashLoopBackOff doubles from its base after each restart and
// is capped at 30 times the base (10 s to 5 min in the kubelet,
// pkg/kubelet/kuberuntime, here in units of StepInterval).
func restartBackoff(step time.Duration, restarts int32) time.Duration {
	d := step
	for i := int32(0); i < restarts && d < 30*step; i++ {
		d *= 2
	}
	return min(d, 30*step)
}
