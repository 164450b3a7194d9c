package machine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// dataVolumeRestartLimit is how many restarts of a DataVolume's importer or
// clone pod macvirt waits for before it calls the disk failed. CDI never
// fails an import for a bad URL, bad credentials or a corrupt image: it
// restarts the pod (RestartPolicyOnFailure) with the kubelet's growing
// back-off, forever. Three restarts take a few minutes on a real cluster
// (10 s, 20 s, 40 s of back-off), long enough for a transient error to
// clear, short enough that a pool replaces the machine instead of counting
// it against maxProvisioning forever.
const dataVolumeRestartLimit = 3

// Reasons CDI puts on a DataVolume's conditions
// (pkg/controller/util.go, pkg/controller/common/util.go,
// pkg/controller/datavolume/conditions.go and clone-controller-base.go).
const (
	cdiReasonError              = "Error"
	cdiReasonImagePullFailed    = "ImagePullFailed"
	cdiReasonExceededQuota      = "ErrExceededQuota"
	cdiReasonUnschedulable      = "Unschedulable"
	cdiReasonCloneWithoutSource = "CloneWithoutSource"
	// CDI's Bound reason for a DataVolume whose PVC it cannot render
	// (pkg/controller/datavolume/controller-base.go, syncDvPvcState).
	cdiReasonClaimNotValid = "ErrClaimNotValid"
)

// Severity of a disk problem: the worst one across the disks is shown.
const (
	diskWaiting  = 1 // CDI retries or waits; no human needed yet
	diskStalled  = 2 // a human must act; the machine waits for them
	diskTerminal = 3 // the machine is Failed, a pool replaces it
)

// stalledDiskReasons are DisksReady reasons that need a human: the machine
// stays Provisioning with Stalled=True. A replacement would meet the same
// quota or missing source, so a pool does not replace it.
var stalledDiskReasons = map[string]bool{
	macvirtv1alpha1.ReasonDataVolumeQuotaExceeded: true,
	macvirtv1alpha1.ReasonDiskClaimNotValid:       true,
	macvirtv1alpha1.ReasonWaitingForDiskSource:    true,
}

// diskWarningReasons are DisksReady reasons announced by a Warning event
// when the machine enters them (a Failed machine has its own).
var diskWarningReasons = map[string]bool{
	macvirtv1alpha1.ReasonDataVolumeRetrying:      true,
	macvirtv1alpha1.ReasonDiskClaimNotValid:       true,
	macvirtv1alpha1.ReasonDataVolumeQuotaExceeded: true,
	macvirtv1alpha1.ReasonImporterUnschedulable:   true,
	macvirtv1alpha1.ReasonWaitingForDiskSource:    true,
}

// dataVolumeProblem reads what CDI says is wrong with one DataVolume, in
// CDI's own words, and how bad it is; ok is false when nothing is wrong.
func dataVolumeProblem(dv *cdiv1.DataVolume, src *diskSource) (c base.Condition, severity int, ok bool) {
	if dv.Status.Phase == cdiv1.Failed {
		return base.CondFalse(macvirtv1alpha1.ReasonDataVolumeFailed, "DataVolume %s failed: %s", dv.Name, dataVolumeMessage(dv)), diskTerminal, true
	}
	if bound := dvCondition(dv, cdiv1.DataVolumeBound); bound != nil && bound.Status == corev1.ConditionFalse {
		switch bound.Reason {
		case cdiReasonExceededQuota:
			return base.CondFalse(macvirtv1alpha1.ReasonDataVolumeQuotaExceeded,
				"DataVolume %s: the API server refuses its PVC for a quota (CDI: %s: %s); raise the namespace's storage ResourceQuota or free storage",
				dv.Name, bound.Reason, bound.Message), diskStalled, true
		case cdiReasonClaimNotValid:
			return base.CondFalse(macvirtv1alpha1.ReasonDiskClaimNotValid,
				"DataVolume %s: CDI cannot make its PVC (%s: %s); give the StorageProfile of the disk's storage class the access and volume modes "+
					"to use (spec.claimPropertySets), or name a storage class CDI knows in the class's disk source",
				dv.Name, bound.Reason, bound.Message), diskStalled, true
		case cdiReasonCloneWithoutSource:
			return base.CondFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s waits for its clone source (CDI: %s: %s); create the golden image or fix the class's disk source",
				dv.Name, bound.Reason, bound.Message), diskStalled, true
		}
	}
	if running := dvCondition(dv, cdiv1.DataVolumeRunning); running != nil && running.Status == corev1.ConditionFalse {
		switch running.Reason {
		case cdiReasonError, cdiReasonImagePullFailed:
			if dv.Status.RestartCount >= dataVolumeRestartLimit {
				return base.CondFalse(macvirtv1alpha1.ReasonDataVolumeFailed,
					"DataVolume %s keeps failing: CDI restarted its pod %d times (limit %d), last error (%s): %s; fix the class's disk source (URL, credentials, image)",
					dv.Name, dv.Status.RestartCount, dataVolumeRestartLimit, running.Reason, running.Message), diskTerminal, true
			}
			return base.CondFalse(macvirtv1alpha1.ReasonDataVolumeRetrying,
				"DataVolume %s failed and CDI retries it (restart %d of %d before macvirt gives up): %s: %s",
				dv.Name, dv.Status.RestartCount, dataVolumeRestartLimit, running.Reason, running.Message), diskWaiting, true
		case cdiReasonUnschedulable:
			return base.CondFalse(macvirtv1alpha1.ReasonImporterUnschedulable,
				"DataVolume %s: CDI reports %s: %s", dv.Name, running.Reason, running.Message), diskWaiting, true
		}
	}
	switch dv.Status.Phase {
	case cdiv1.PendingPopulation, cdiv1.WaitForFirstConsumer:
		// macvirt does not ask CDI to bind at once
		// (cdi.kubevirt.io/storage.bind.immediate.requested): on node-local
		// storage, typical of Mac hosts, that pins the disks to whichever
		// node ran the importer before the scheduler has picked a node with
		// room for the VM. The disks fill on first start, where the VM
		// lands; until then a stopped machine says so (summarize).
		return base.CondFalse(macvirtv1alpha1.ReasonWaitingForFirstConsumer,
			"DataVolume %s is %s: its storage class binds on first consumer, so CDI fills it when the machine first starts",
			dv.Name, dv.Status.Phase), diskWaiting, true
	case cdiv1.PhaseUnset:
		if src == nil {
			break
		}
		if !src.Found {
			return base.CondFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s has no status from CDI: its DataSource %s does not exist; create it or fix the class's sourceRef",
				dv.Name, src.Key), diskStalled, true
		}
		if r := src.Ready; r == nil || r.Status != corev1.ConditionTrue {
			why := "CDI has not reported it Ready"
			if r != nil {
				why = fmt.Sprintf("CDI reports Ready=%s, %s: %s", r.Status, r.Reason, r.Message)
			}
			return base.CondFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s has no status from CDI: its DataSource %s has no source to clone yet (%s)",
				dv.Name, src.Key, why), diskStalled, true
		}
	}
	return base.Condition{}, 0, false
}

// worstDiskProblem is the most severe problem across the DataVolumes, the
// first disk's on a tie.
func worstDiskProblem(o machineObservation) (base.Condition, bool) {
	var worst base.Condition
	worstSeverity := 0
	for _, dv := range o.DataVolumes {
		if dv == nil {
			continue
		}
		if c, sev, ok := dataVolumeProblem(dv, o.DiskSources[dv.Name]); ok && sev > worstSeverity {
			worst, worstSeverity = c, sev
		}
	}
	return worst, worstSeverity > 0
}

func dvCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType) *cdiv1.DataVolumeCondition {
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == t {
			return &dv.Status.Conditions[i]
		}
	}
	return nil
}

// diskState is what the DataVolumes say.
type diskState struct {
	cond     base.Condition
	progress string
}

// observeDisks maps the DataVolumes to the DisksReady condition and the
// progress of the slowest one.
func observeDisks(o machineObservation) diskState {
	if len(o.DataVolumes) == 0 {
		return diskState{cond: base.CondFalse(macvirtv1alpha1.ReasonPending, "disks not requested yet")}
	}
	if slices.Contains(o.DataVolumes, nil) {
		return diskState{cond: base.CondFalse(macvirtv1alpha1.ReasonPending, "disks not requested yet")}
	}
	// What CDI reports as wrong (dataVolumeProblem) wins over progress.
	if c, ok := worstDiskProblem(o); ok {
		return diskState{cond: c}
	}
	var waiting []string
	var unfinished []diskProgress
	for _, dv := range o.DataVolumes {
		if dv.Status.Phase == cdiv1.Succeeded {
			continue
		}
		phase := string(dv.Status.Phase)
		if phase == "" {
			phase = "Pending"
		}
		// Phases only: CDI's own progress changes every 2 s (see reportedProgress).
		waiting = append(waiting, fmt.Sprintf("%s %s", dv.Name, phase))
		unfinished = append(unfinished, diskProgress{dv.Status.Phase, dv.Status.Progress})
	}
	if len(waiting) == 0 {
		return diskState{cond: base.CondTrue("system and bootloader disks are ready")}
	}
	previous := ""
	if p := o.Machine.Status.Provisioning; p != nil {
		previous = p.Progress
	}
	progress := reportedProgress(unfinished, previous)
	if progress == "" {
		// Every disk is cloned by a method that reports no progress.
		return diskState{cond: base.CondFalse(macvirtv1alpha1.ReasonProvisioning,
			"cloning (CDI reports no progress for this clone method until it is done): %s", strings.Join(waiting, ", "))}
	}
	return diskState{
		cond:     base.CondFalse(macvirtv1alpha1.ReasonProvisioning, "importing (%s): %s", progress, strings.Join(waiting, ", ")),
		progress: progress,
	}
}

// dataVolumeMessage is the most useful message CDI left on a DataVolume.
func dataVolumeMessage(dv *cdiv1.DataVolume) string {
	for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady, cdiv1.DataVolumeBound} {
		for _, c := range dv.Status.Conditions {
			if c.Type == t && c.Message != "" {
				return c.Message
			}
		}
	}
	return "no message from CDI"
}

// provisioningStatus is status.provisioning: the progress while the disks
// fill, and, once the system disk is done, how CDI made it and how long it
// took. Both are read from the system disk's DataVolume, so they do not
// change from one reconcile to the next; once the DataVolume is gone (CDI
// may garbage-collect it) the recorded values stay.
func provisioningStatus(o machineObservation, progress string) *macvirtv1alpha1.ProvisioningStatus {
	st := &macvirtv1alpha1.ProvisioningStatus{Progress: progress}
	if prev := o.Machine.Status.Provisioning; prev != nil {
		st.CloneStrategy, st.Duration = prev.CloneStrategy, prev.Duration
	}
	if len(o.DataVolumes) > 1 {
		if dv := o.DataVolumes[1]; dv != nil && dv.Status.Phase == cdiv1.Succeeded {
			st.CloneStrategy = dv.Annotations[base.AnnCloneType]
			if done := base.DataVolumeReadyAt(dv); done != nil {
				st.Duration = &metav1.Duration{Duration: done.Sub(dv.CreationTimestamp.Time).Round(time.Second)}
			}
		}
	}
	if *st == (macvirtv1alpha1.ProvisioningStatus{}) {
		return nil
	}
	return st
}
