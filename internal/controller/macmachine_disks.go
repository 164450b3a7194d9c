package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
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
)

// diskSource is what the operator read of a DataVolume's DataSource, for a
// DataVolume CDI has not reported on yet.
type diskSource struct {
	Key   types.NamespacedName
	Found bool
	// Ready is the DataSource's Ready condition; nil when CDI set none.
	Ready *cdiv1.DataSourceCondition
}

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
	macvirtv1alpha1.ReasonWaitingForDiskSource:    true,
}

// diskWarningReasons are DisksReady reasons announced by a Warning event
// when the machine enters them (a Failed machine has its own).
var diskWarningReasons = map[string]bool{
	macvirtv1alpha1.ReasonDataVolumeRetrying:      true,
	macvirtv1alpha1.ReasonDataVolumeQuotaExceeded: true,
	macvirtv1alpha1.ReasonImporterUnschedulable:   true,
	macvirtv1alpha1.ReasonWaitingForDiskSource:    true,
}

// dataVolumeProblem reads what CDI says is wrong with one DataVolume, in
// CDI's own words, and how bad it is; ok is false when nothing is wrong.
func dataVolumeProblem(dv *cdiv1.DataVolume, src *diskSource) (c condition, severity int, ok bool) {
	if dv.Status.Phase == cdiv1.Failed {
		return condFalse(macvirtv1alpha1.ReasonDataVolumeFailed, "DataVolume %s failed: %s", dv.Name, dataVolumeMessage(dv)), diskTerminal, true
	}
	if bound := dvCondition(dv, cdiv1.DataVolumeBound); bound != nil && bound.Status == corev1.ConditionFalse {
		switch bound.Reason {
		case cdiReasonExceededQuota:
			return condFalse(macvirtv1alpha1.ReasonDataVolumeQuotaExceeded,
				"DataVolume %s: the API server refuses its PVC for a quota (CDI: %s: %s); raise the namespace's storage ResourceQuota or free storage",
				dv.Name, bound.Reason, bound.Message), diskStalled, true
		case cdiReasonCloneWithoutSource:
			return condFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s waits for its clone source (CDI: %s: %s); create the golden image or fix the class's disk source",
				dv.Name, bound.Reason, bound.Message), diskStalled, true
		}
	}
	if running := dvCondition(dv, cdiv1.DataVolumeRunning); running != nil && running.Status == corev1.ConditionFalse {
		switch running.Reason {
		case cdiReasonError, cdiReasonImagePullFailed:
			if dv.Status.RestartCount >= dataVolumeRestartLimit {
				return condFalse(macvirtv1alpha1.ReasonDataVolumeFailed,
					"DataVolume %s keeps failing: CDI restarted its pod %d times (limit %d), last error (%s): %s; fix the class's disk source (URL, credentials, image)",
					dv.Name, dv.Status.RestartCount, dataVolumeRestartLimit, running.Reason, running.Message), diskTerminal, true
			}
			return condFalse(macvirtv1alpha1.ReasonDataVolumeRetrying,
				"DataVolume %s failed and CDI retries it (restart %d of %d before macvirt gives up): %s: %s",
				dv.Name, dv.Status.RestartCount, dataVolumeRestartLimit, running.Reason, running.Message), diskWaiting, true
		case cdiReasonUnschedulable:
			return condFalse(macvirtv1alpha1.ReasonImporterUnschedulable,
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
		return condFalse(macvirtv1alpha1.ReasonWaitingForFirstConsumer,
			"DataVolume %s is %s: its storage class binds on first consumer, so CDI fills it when the machine first starts",
			dv.Name, dv.Status.Phase), diskWaiting, true
	case cdiv1.PhaseUnset:
		if src == nil {
			break
		}
		if !src.Found {
			return condFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s has no status from CDI: its DataSource %s does not exist; create it or fix the class's sourceRef",
				dv.Name, src.Key), diskStalled, true
		}
		if r := src.Ready; r == nil || r.Status != corev1.ConditionTrue {
			why := "CDI has not reported it Ready"
			if r != nil {
				why = fmt.Sprintf("CDI reports Ready=%s, %s: %s", r.Status, r.Reason, r.Message)
			}
			return condFalse(macvirtv1alpha1.ReasonWaitingForDiskSource,
				"DataVolume %s has no status from CDI: its DataSource %s has no source to clone yet (%s)",
				dv.Name, src.Key, why), diskStalled, true
		}
	}
	return condition{}, 0, false
}

// worstDiskProblem is the most severe problem across the DataVolumes, the
// first disk's on a tie.
func worstDiskProblem(o machineObservation) (condition, bool) {
	var worst condition
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

// observeDiskSources reads the DataSource of each DataVolume CDI has not
// reported on yet: CDI gives a clone whose DataSource does not resolve no
// status at all, so only the DataSource can say why.
func (r *MacMachineReconciler) observeDiskSources(ctx context.Context, o *machineObservation) error {
	o.DiskSources = nil
	for _, dv := range o.DataVolumes {
		if dv == nil || dv.Status.Phase != cdiv1.PhaseUnset || dv.Spec.SourceRef == nil ||
			dv.Spec.SourceRef.Kind != cdiv1.DataVolumeDataSource {
			continue
		}
		key := types.NamespacedName{Namespace: dv.Namespace, Name: dv.Spec.SourceRef.Name}
		if ns := dv.Spec.SourceRef.Namespace; ns != nil && *ns != "" {
			key.Namespace = *ns
		}
		ds := &cdiv1.DataSource{}
		if err := getOptional(ctx, r.Client, key, ds); err != nil {
			return err
		}
		src := &diskSource{Key: key, Found: ds.Name != ""}
		for i := range ds.Status.Conditions {
			if ds.Status.Conditions[i].Type == cdiv1.DataSourceReady {
				src.Ready = &ds.Status.Conditions[i]
			}
		}
		if o.DiskSources == nil {
			o.DiskSources = map[string]*diskSource{}
		}
		o.DiskSources[dv.Name] = src
	}
	return nil
}

// recordDiskProblem announces, with a Warning event, a disk problem the
// machine has just entered.
func (r *MacMachineReconciler) recordDiskProblem(before, after *macvirtv1alpha1.MacMachine) {
	now := meta.FindStatusCondition(after.Status.Conditions, macvirtv1alpha1.ConditionDisksReady)
	if now == nil || !diskWarningReasons[now.Reason] {
		return
	}
	if was := meta.FindStatusCondition(before.Status.Conditions, macvirtv1alpha1.ConditionDisksReady); was != nil && was.Reason == now.Reason {
		return
	}
	recordEvent(r.Recorder, after, corev1.EventTypeWarning, now.Reason, "Reconcile", now.Message)
}
