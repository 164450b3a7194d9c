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
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// DataVolumeProgressUnknown makes an importing or cloning DataVolume report
// progress "N/A" from its next step on, and hold its transfer, until the
// fault is cleared; then it resumes from where it was. CDI falls back to
// "N/A" in the middle of an import when it cannot read the progress: the
// target claim has no progress annotation (reconcileProgressUpdate in
// pkg/controller/datavolume/controller-base.go), or the importer pod is not
// running. Name is the DataVolume name. A simulator restarted meanwhile
// resumes from the start, like a restarted importer.
const DataVolumeProgressUnknown FaultKind = "DataVolumeProgressUnknown"

// nextDataVolumeTick is nextDataVolumeStatus with the DataVolume's own
// number of steps and the DataVolumeProgressUnknown fault applied.
func (s *Simulator) nextDataVolumeTick(dv *cdiv1.DataVolume, f dvFaults) (cdiv1.DataVolumeStatus, bool) {
	steps := s.importSteps(dv)
	k := dv.Namespace + "/" + dv.Name
	transferring := dv.Status.Phase == cdiv1.ImportInProgress || dv.Status.Phase == cdiv1.CloneInProgress
	if transferring && !f.failed && s.hasFault(DataVolumeProgressUnknown, dv.Namespace, dv.Name) {
		if dv.Status.Progress == progressUnknown {
			return dv.Status, false
		}
		s.timing.mu.Lock()
		s.timing.hidden[k] = dv.Status.Progress
		s.timing.mu.Unlock()
		st := *dv.Status.DeepCopy()
		st.Progress = progressUnknown
		return st, true
	}
	s.timing.mu.Lock()
	hidden, ok := s.timing.hidden[k]
	delete(s.timing.hidden, k)
	s.timing.mu.Unlock()
	if transferring && dv.Status.Progress == progressUnknown {
		if !ok {
			hidden = progressAt(0, steps)
		}
		dv = dv.DeepCopy()
		dv.Status.Progress = hidden
	}
	return nextDataVolumeStatus(dv, steps, f)
}
