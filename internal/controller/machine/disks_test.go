package machine

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// dvWith is a DataVolume in phase with one condition and a restart count.
func dvWith(name string, phase cdiv1.DataVolumePhase, t cdiv1.DataVolumeConditionType, reason, msg string, restarts int32) *cdiv1.DataVolume {
	d := dv(name, phase, "N/A")
	d.Status.RestartCount = restarts
	if t != "" {
		d.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: t, Status: corev1.ConditionFalse, Reason: reason, Message: msg}}
	}
	return d
}

func TestComputeMachineStatusForDisksCDICannotFill(t *testing.T) {
	ok := dv("m-opencore", cdiv1.Succeeded, "100.0%")
	http404 := "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"
	dataSource := types.NamespacedName{Namespace: "macvirt-images", Name: "sonoma"}
	clone := func() *cdiv1.DataVolume {
		d := dv("m-system", cdiv1.PhaseUnset, "")
		d.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: &dataSource.Namespace, Name: dataSource.Name}
		return d
	}
	stopped := func(m *macvirtv1alpha1.MacMachine) { m.Spec.Running = ptr.To(false) }
	cases := map[string]struct {
		disks      []*cdiv1.DataVolume
		sources    map[string]*diskSource
		mods       []func(*macvirtv1alpha1.MacMachine)
		phase      macvirtv1alpha1.MachinePhase
		disksWhy   string
		readyWhy   string
		stalled    metav1.ConditionStatus
		messageHas string
	}{
		"an import CDI retries": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.ImportInProgress, cdiv1.DataVolumeRunning, "Error", http404, 1)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonDataVolumeRetrying, readyWhy: macvirtv1alpha1.ReasonDataVolumeRetrying,
			stalled: metav1.ConditionFalse, messageHas: "(restart 1 of 3 before macvirt gives up): Error: " + http404},
		"an image pull CDI retries": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.ImportScheduled, cdiv1.DataVolumeRunning, "ImagePullFailed", "failed to pull image: quay.io/x", 2)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonDataVolumeRetrying, readyWhy: macvirtv1alpha1.ReasonDataVolumeRetrying,
			stalled: metav1.ConditionFalse, messageHas: "failed to pull image"},
		"an import that keeps failing fails the machine": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.ImportInProgress, cdiv1.DataVolumeRunning, "Error", http404, 3)},
			phase: macvirtv1alpha1.MachineFailed, disksWhy: macvirtv1alpha1.ReasonDataVolumeFailed, readyWhy: macvirtv1alpha1.ReasonDataVolumeFailed,
			stalled: metav1.ConditionTrue, messageHas: "restarted its pod 3 times (limit 3), last error (Error): " + http404},
		"a failing disk wins over a retrying one": {disks: []*cdiv1.DataVolume{
			dvWith("m-opencore", cdiv1.ImportInProgress, cdiv1.DataVolumeRunning, "Error", "x", 1),
			dvWith("m-system", cdiv1.ImportInProgress, cdiv1.DataVolumeRunning, "Error", http404, 4)},
			phase: macvirtv1alpha1.MachineFailed, disksWhy: macvirtv1alpha1.ReasonDataVolumeFailed, readyWhy: macvirtv1alpha1.ReasonDataVolumeFailed,
			stalled: metav1.ConditionTrue, messageHas: "m-system"},
		"a quota refusal needs a human": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.Pending, cdiv1.DataVolumeBound, "ErrExceededQuota", "exceeded quota: storage", 0)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonDataVolumeQuotaExceeded, readyWhy: macvirtv1alpha1.ReasonDataVolumeQuotaExceeded,
			stalled: metav1.ConditionTrue, messageHas: "ErrExceededQuota: exceeded quota: storage"},
		"an unschedulable importer": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.ImportScheduled, cdiv1.DataVolumeRunning, "Unschedulable", "Importer pod cannot be scheduled", 0)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonImporterUnschedulable, readyWhy: macvirtv1alpha1.ReasonImporterUnschedulable,
			stalled: metav1.ConditionFalse, messageHas: "Importer pod cannot be scheduled"},
		"a storage class whose StorageProfile gives no access modes": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.PhaseUnset, cdiv1.DataVolumeBound,
			"ErrClaimNotValid", "no accessMode specified in StorageProfile local", 0)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonDiskClaimNotValid, readyWhy: macvirtv1alpha1.ReasonDiskClaimNotValid,
			stalled: metav1.ConditionTrue, messageHas: "ErrClaimNotValid: no accessMode specified in StorageProfile local); give the StorageProfile"},
		"a clone without its source PVC": {disks: []*cdiv1.DataVolume{ok, dvWith("m-system", cdiv1.PhaseUnset, cdiv1.DataVolumeBound, "CloneWithoutSource", "The source pvc sonoma doesn't exist", 0)},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonWaitingForDiskSource, readyWhy: macvirtv1alpha1.ReasonWaitingForDiskSource,
			stalled: metav1.ConditionTrue, messageHas: "The source pvc sonoma doesn't exist"},
		"a clone whose DataSource is missing": {disks: []*cdiv1.DataVolume{ok, clone()},
			sources: map[string]*diskSource{"m-system": {Key: dataSource}},
			phase:   macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonWaitingForDiskSource, readyWhy: macvirtv1alpha1.ReasonWaitingForDiskSource,
			stalled: metav1.ConditionTrue, messageHas: "DataSource macvirt-images/sonoma does not exist"},
		"a clone whose DataSource has no source": {disks: []*cdiv1.DataVolume{ok, clone()},
			sources: map[string]*diskSource{"m-system": {Key: dataSource, Found: true, Ready: &cdiv1.DataSourceCondition{Type: cdiv1.DataSourceReady,
				ConditionState: cdiv1.ConditionState{Status: corev1.ConditionFalse, Reason: "NoSource", Message: "No source PVC set"}}}},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonWaitingForDiskSource, readyWhy: macvirtv1alpha1.ReasonWaitingForDiskSource,
			stalled: metav1.ConditionTrue, messageHas: "CDI reports Ready=False, NoSource: No source PVC set"},
		"a clone whose DataSource is Ready waits for CDI quietly": {disks: []*cdiv1.DataVolume{ok, clone()},
			sources: map[string]*diskSource{"m-system": {Key: dataSource, Found: true, Ready: &cdiv1.DataSourceCondition{Type: cdiv1.DataSourceReady,
				ConditionState: cdiv1.ConditionState{Status: corev1.ConditionTrue, Reason: "Ready"}}}},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonProvisioning, readyWhy: macvirtv1alpha1.ReasonProvisioning,
			stalled: metav1.ConditionFalse, messageHas: "m-system Pending"},
		"a stopped machine on a WaitForFirstConsumer class": {disks: []*cdiv1.DataVolume{dv("m-opencore", cdiv1.PendingPopulation, ""), dv("m-system", cdiv1.PendingPopulation, "")},
			mods:  []func(*macvirtv1alpha1.MacMachine){stopped},
			phase: macvirtv1alpha1.MachineStopped, disksWhy: macvirtv1alpha1.ReasonWaitingForFirstConsumer, readyWhy: macvirtv1alpha1.ReasonStopped,
			stalled: metav1.ConditionFalse, messageHas: "populate on first start"},
		"a running machine on a WaitForFirstConsumer class": {disks: []*cdiv1.DataVolume{ok, dv("m-system", cdiv1.WaitForFirstConsumer, "")},
			phase: macvirtv1alpha1.MachineProvisioning, disksWhy: macvirtv1alpha1.ReasonWaitingForFirstConsumer, readyWhy: macvirtv1alpha1.ReasonWaitingForFirstConsumer,
			stalled: metav1.ConditionFalse, messageHas: "fills it when the machine first starts"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := computeMachineStatus(machineObservation{Now: t0, Machine: machine(tc.mods...), Class: class(),
				DataVolumes: tc.disks, DiskSources: tc.sources}).Status
			if got.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", got.Phase, tc.phase)
			}
			disks := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionDisksReady)
			if disks == nil || disks.Status != metav1.ConditionFalse || disks.Reason != tc.disksWhy {
				t.Errorf("DisksReady = %+v, want False %s", disks, tc.disksWhy)
			}
			ready := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.readyWhy || !strings.Contains(ready.Message, tc.messageHas) {
				t.Errorf("Ready = %+v, want reason %s saying %q", ready, tc.readyWhy, tc.messageHas)
			}
			if s := meta.FindStatusCondition(got.Conditions, macvirtv1alpha1.ConditionStalled); s == nil || s.Status != tc.stalled {
				t.Errorf("Stalled = %+v, want %s", s, tc.stalled)
			}
		})
	}
}
