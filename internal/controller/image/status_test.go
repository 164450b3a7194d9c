package image

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

func TestComputeImageStatus(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	done := metav1.NewTime(created.Add(90 * time.Second))
	machine := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "alice-mac", UID: "m1"}}
	dv := func(phase cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		d := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: "xcode-16", CreationTimestamp: created,
			Annotations: map[string]string{base.AnnCloneType: "snapshot"}},
			Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("128Gi")}}}},
			Status: cdiv1.DataVolumeStatus{Phase: phase, Progress: "40.0%"}}
		if phase == cdiv1.Succeeded {
			d.Status.Conditions = []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeReady, Status: corev1.ConditionTrue, LastTransitionTime: done}}
		}
		return d
	}
	published := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "macvirt-images", Name: "xcode-16"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "macvirt-images", Name: "xcode-16"}}}}
	for name, tc := range map[string]struct {
		scope       imageScope
		phase       macvirtv1alpha1.ImagePhase
		readyReason string
		stalled     bool
	}{
		"claim not bound yet": {scope: imageScope{Problem: &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotFound, Message: "not bound"}},
			phase: macvirtv1alpha1.ImagePending, readyReason: macvirtv1alpha1.ReasonSourceNotFound, stalled: true},
		"stopping the Mac": {scope: imageScope{Machine: machine, Stopping: true},
			phase: macvirtv1alpha1.ImageStopping, readyReason: macvirtv1alpha1.ReasonStoppingSource},
		"copying": {scope: imageScope{Machine: machine, Copy: dv(cdiv1.CloneInProgress)},
			phase: macvirtv1alpha1.ImageCopying, readyReason: macvirtv1alpha1.ReasonCopying},
		"snapshotting the copy": {scope: imageScope{Machine: machine, Copy: dv(cdiv1.Succeeded)},
			phase: macvirtv1alpha1.ImagePublishing, readyReason: macvirtv1alpha1.ReasonPublishing},
		"published": {scope: imageScope{Machine: machine, Copy: dv(cdiv1.Succeeded), Published: published},
			phase: macvirtv1alpha1.ImageReady, readyReason: macvirtv1alpha1.ReasonAsExpected},
		"copy failed": {scope: imageScope{Machine: machine, Copy: dv(cdiv1.Failed), Terminal: true,
			Problem: &base.Problem{Reason: macvirtv1alpha1.ReasonCopyFailed, Message: "clone failed"}},
			phase: macvirtv1alpha1.ImageFailed, readyReason: macvirtv1alpha1.ReasonCopyFailed, stalled: true},
	} {
		t.Run(name, func(t *testing.T) {
			s := tc.scope
			s.Image = &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode-16", Generation: 1}}
			st := computeImageStatus(&s)
			if st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.phase)
			}
			ready := meta.FindStatusCondition(st.Conditions, macvirtv1alpha1.ConditionReady)
			if ready == nil || ready.Reason != tc.readyReason || (ready.Status == metav1.ConditionTrue) != (tc.phase == macvirtv1alpha1.ImageReady) {
				t.Errorf("Ready = %+v, want reason %s", ready, tc.readyReason)
			}
			if got := meta.IsStatusConditionTrue(st.Conditions, macvirtv1alpha1.ConditionStalled); got != tc.stalled {
				t.Errorf("Stalled = %v, want %v", got, tc.stalled)
			}
			s.Image.Status = st
			if again := computeImageStatus(&s); !equalStatus(again, st) {
				t.Errorf("a second reconcile of the same scope changes the status: %+v then %+v", st, again)
			}
		})
	}
	s := imageScope{Image: &macvirtv1alpha1.MacImage{}, Machine: machine, Copy: dv(cdiv1.Succeeded), Published: published}
	st := computeImageStatus(&s)
	if st.Copy.CloneStrategy != "snapshot" || st.Copy.CompletedAt == nil || !st.Copy.CompletedAt.Equal(&done) || st.Size.String() != "128Gi" ||
		st.PublishedAs != macvirtv1alpha1.ImagePublishedAsSnapshot || st.Machine.UID != "m1" {
		t.Errorf("published status = %+v, copy %+v", st, st.Copy)
	}
}

func equalStatus(a, b macvirtv1alpha1.MacImageStatus) bool {
	return a.Phase == b.Phase && len(a.Conditions) == len(b.Conditions) && meta.FindStatusCondition(a.Conditions, macvirtv1alpha1.ConditionReady).LastTransitionTime.Equal(
		&meta.FindStatusCondition(b.Conditions, macvirtv1alpha1.ConditionReady).LastTransitionTime)
}
