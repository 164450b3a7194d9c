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
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// Why CDI falls back to a host-assisted copy, as the Warning event on the
// target PVC says it and the cdi.kubevirt.io/cloneFallbackReason annotation
// keeps the message (pkg/controller/clone/planner.go; NoPopulator:
// pkg/controller/datavolume/clone-controller-base.go).
const (
	reasonNoPopulator              = "NoPopulator"
	msgNoPopulator                 = "In tree storage class does not support snapshot/clone"
	reasonNoVolumeSnapshotClass    = "NoVolumeSnapshotClass"
	msgNoVolumeSnapshotClass       = "No compatible volumesnapshotclass found"
	reasonIncompatibleVolumeModes  = "IncompatibleVolumeModes"
	msgIncompatibleVolumeModes     = "The volume modes of source and target are incompatible"
	reasonNoVolumeExpansion        = "NoVolumeExpansion"
	msgNoVolumeExpansion           = "No volume expansion is possible"
	reasonNoProvisionerMatch       = "NoProvisionerMatch"
	msgNoProvisionerMatch          = "The storageclass provisioner does not match the volumesnapshotcontent driver"
	reasonIncompatibleProvisioners = "IncompatibleProvisioners"
	msgIncompatibleProvisioners    = "Provisioners are incompatible"
)

// gib is the unit of Options.CloneDurations for copies.
const gib = 1 << 30

// referenceCopyBytes is the size whose copy takes as long as an import by
// default, and the size of a copy whose source size is unknown: a macOS
// disk.
const referenceCopyBytes = 64 * gib

// clonePlan is how CDI carries a clone out: the strategy it chose, whether
// the source is a VolumeSnapshot, and whether its clone populator runs the
// clone (CSI storage) or the DataVolume controller's legacy host-assisted
// clone does.
type clonePlan struct {
	strategy     cdiv1.CDICloneStrategy
	fromSnapshot bool
	populator    bool
}

// phases are the DataVolume phases a clone passes through after
// CloneScheduled and before Succeeded: those before its host-assisted copy,
// whether it copies (CloneInProgress, with progress), and those after. They
// are the clone planner's phases (pkg/controller/clone/planner.go:
// planSnapshotFromPVC, planCSIClone, planSmartCloneFromSnapshot,
// planHostAssistedFromSnapshot, planHostAssistedFromPVC) as the DataVolume
// controller names them (pkg/controller/datavolume/clone-controller-base.go,
// populatorPhaseMap); the legacy clone only copies.
func (p clonePlan) phases() (before []cdiv1.DataVolumePhase, copies bool, after []cdiv1.DataVolumePhase) {
	switch {
	case p.strategy == cdiv1.CloneStrategySnapshot && p.fromSnapshot:
		return []cdiv1.DataVolumePhase{cdiv1.CloneFromSnapshotSourceInProgress, cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress}, false, nil
	case p.strategy == cdiv1.CloneStrategySnapshot:
		return []cdiv1.DataVolumePhase{cdiv1.SnapshotForSmartCloneInProgress, cdiv1.CloneFromSnapshotSourceInProgress,
			cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress}, false, nil
	case p.strategy == cdiv1.CloneStrategyCsiClone:
		return []cdiv1.DataVolumePhase{cdiv1.CSICloneInProgress, cdiv1.PrepClaimInProgress, cdiv1.RebindInProgress}, false, nil
	case p.populator && p.fromSnapshot:
		return []cdiv1.DataVolumePhase{cdiv1.CloneFromSnapshotSourceInProgress, cdiv1.PrepClaimInProgress}, true,
			[]cdiv1.DataVolumePhase{cdiv1.RebindInProgress}
	case p.populator:
		return nil, true, []cdiv1.DataVolumePhase{cdiv1.RebindInProgress}
	}
	return nil, true, nil
}

// smart reports a clone the storage makes on its side (snapshot or CSI
// clone): its time does not depend on its size.
func (p clonePlan) smart() bool {
	return p.strategy == cdiv1.CloneStrategySnapshot || p.strategy == cdiv1.CloneStrategyCsiClone
}

// cloneInput is what CDI reads to choose a clone's strategy.
type cloneInput struct {
	fromSnapshot bool
	// target is the target PVC's storage class, nil when it has none.
	target *storagev1.StorageClass
	// targetSpec is the target PVC's rendered spec.
	targetSpec corev1.PersistentVolumeClaimSpec
	// profile is the target class's StorageProfile.
	profile *cdiv1.StorageProfile
	// populator: CDI's clone populator runs the clone.
	populator bool
	// sourceDriver is the CSI driver of the source: the source PVC's class
	// provisioner, or the snapshot content's driver.
	sourceDriver string
	sourceMode   corev1.PersistentVolumeMode
	// sourceSize is the source PVC's capacity or the snapshot's restore
	// size; nil when unknown.
	sourceSize *resource.Quantity
	// snapshotClass is the snapshot class usable for both PVCs.
	snapshotClass string
	// fallback is Options.CloneStrategy, the strategy of a DataVolume with
	// no storage class.
	fallback cdiv1.CDICloneStrategy
}

// cloneChoice is the chosen plan and, for a fallback to copy, the Warning
// event CDI records on the target PVC.
type cloneChoice struct {
	plan                            clonePlan
	fallbackReason, fallbackMessage string
}

// chooseCloneStrategy picks a clone's plan as CDI does: no populator (the
// class has no CSIDriver) means the legacy copy; a snapshot source is
// restored by snapshot unless the provisioner, size or volume mode rule it
// out (pkg/controller/clone/planner.go, computeStrategyForSourceSnapshot);
// a PVC source takes the profile's strategy, snapshot by default, and falls
// back to copy without a common snapshot class, a common driver, the same
// volume mode, or room to expand (computeStrategyForSourcePVC,
// validateAdvancedClonePVC). A DataVolume with no storage class takes
// Options.CloneStrategy, a simulator setting.
func chooseCloneStrategy(in cloneInput) cloneChoice {
	if in.target == nil {
		s := in.fallback
		if s == "" {
			s = cdiv1.CloneStrategyHostAssisted
		}
		if in.fromSnapshot && s == cdiv1.CloneStrategyCsiClone {
			s = cdiv1.CloneStrategySnapshot
		}
		return cloneChoice{plan: clonePlan{strategy: s, fromSnapshot: in.fromSnapshot, populator: s != cdiv1.CloneStrategyHostAssisted}}
	}
	copyInstead := func(populator bool, reason, msg string) cloneChoice {
		return cloneChoice{plan: clonePlan{strategy: cdiv1.CloneStrategyHostAssisted, fromSnapshot: in.fromSnapshot, populator: populator},
			fallbackReason: reason, fallbackMessage: msg}
	}
	if !in.populator {
		return copyInstead(false, reasonNoPopulator, msgNoPopulator)
	}
	targetMode := volumeModeOf(in.targetSpec.VolumeMode)
	request := in.targetSpec.Resources.Requests[corev1.ResourceStorage]
	expands := in.target.AllowVolumeExpansion != nil && *in.target.AllowVolumeExpansion
	tooSmall := in.sourceSize != nil && in.sourceSize.Cmp(request) < 0 && !expands
	if in.fromSnapshot {
		switch {
		case in.sourceDriver != in.target.Provisioner:
			return copyInstead(true, reasonNoProvisionerMatch, msgNoProvisionerMatch)
		case tooSmall:
			return copyInstead(true, reasonNoVolumeExpansion, msgNoVolumeExpansion)
		case in.sourceMode != targetMode:
			return copyInstead(true, reasonIncompatibleVolumeModes, msgIncompatibleVolumeModes)
		}
		return cloneChoice{plan: clonePlan{strategy: cdiv1.CloneStrategySnapshot, fromSnapshot: true, populator: true}}
	}
	strategy := cdiv1.CloneStrategySnapshot
	if in.profile != nil && in.profile.Status.CloneStrategy != nil {
		strategy = *in.profile.Status.CloneStrategy
	}
	if strategy == cdiv1.CloneStrategySnapshot && in.snapshotClass == "" {
		return copyInstead(true, reasonNoVolumeSnapshotClass, msgNoVolumeSnapshotClass)
	}
	if strategy == cdiv1.CloneStrategySnapshot || strategy == cdiv1.CloneStrategyCsiClone {
		switch {
		case in.sourceDriver == "" || in.sourceDriver != in.target.Provisioner:
			return copyInstead(true, reasonIncompatibleProvisioners, msgIncompatibleProvisioners)
		case in.sourceMode != targetMode:
			return copyInstead(true, reasonIncompatibleVolumeModes, msgIncompatibleVolumeModes)
		case tooSmall:
			return copyInstead(true, reasonNoVolumeExpansion, msgNoVolumeExpansion)
		}
	}
	return cloneChoice{plan: clonePlan{strategy: strategy, populator: true}}
}

// cloneDuration is how long a clone of strategy takes (see
// Options.CloneDurations); for copy, per GiB.
func (s *Simulator) cloneDuration(strategy cdiv1.CDICloneStrategy) time.Duration {
	if d := s.opts.CloneDurations[strategy]; d > 0 {
		return d
	}
	if strategy == cdiv1.CloneStrategyHostAssisted {
		return time.Duration(float64(time.Duration(s.opts.ImportSteps)*s.opts.StepInterval) * gib / referenceCopyBytes)
	}
	before, _, _ := clonePlan{strategy: strategy}.phases()
	return time.Duration(len(before)) * s.opts.StepInterval
}

// dataVolumeStep is how long the DataVolume stays in its current phase (or
// progress step) before the next: a smart clone's phases share its
// strategy's duration, counted over the phases of a clone from a PVC (a
// restore skips the snapshot, so it takes less); a copy's progress steps
// share the time to copy copyBytes; everything else takes StepInterval.
func (s *Simulator) dataVolumeStep(dv *cdiv1.DataVolume, plan clonePlan, copyBytes int64, steps int) time.Duration {
	if !isClone(dv) {
		return s.opts.StepInterval
	}
	before, copies, after := plan.phases()
	phase := dv.Status.Phase
	switch {
	case phase == cdiv1.CloneInProgress && copies:
		if copyBytes <= 0 {
			copyBytes = referenceCopyBytes
		}
		total := time.Duration(float64(s.cloneDuration(cdiv1.CloneStrategyHostAssisted)) * float64(copyBytes) / gib)
		return total / time.Duration(max(steps, 1))
	case plan.smart() && (slices.Contains(before, phase) || slices.Contains(after, phase)):
		all, _, _ := clonePlan{strategy: plan.strategy}.phases()
		return s.cloneDuration(plan.strategy) / time.Duration(len(all))
	}
	return s.opts.StepInterval
}
