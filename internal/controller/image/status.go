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

package image

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// computeImageStatus derives a MacImage's status from what a reconcile
// found; what it did not look at keeps its recorded value.
func computeImageStatus(s *imageScope) macvirtv1alpha1.MacImageStatus {
	img := s.Image
	st := img.Status.DeepCopy()
	st.ObservedGeneration = img.Generation
	if m := s.Machine; m != nil {
		st.Machine = &macvirtv1alpha1.ObjectRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID}
	}
	if dv := s.Copy; dv != nil {
		c := &macvirtv1alpha1.ImageCopyStatus{DataVolume: dv.Name, CloneStrategy: dv.Annotations[base.AnnCloneType],
			Progress: string(dv.Status.Progress), StartedAt: &dv.CreationTimestamp}
		if dv.CreationTimestamp.IsZero() {
			c.StartedAt = nil
		}
		if dv.Status.Phase == cdiv1.Succeeded {
			c.Progress = "100.0%"
			c.CompletedAt = base.DataVolumeReadyAt(dv)
		}
		st.Copy = c
		if dv.Spec.Storage != nil {
			if q, ok := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]; ok {
				st.Size = ptrQuantity(q)
			}
		}
	}
	if snap := s.Snapshot; snap != nil && snap.Status != nil && snap.Status.RestoreSize != nil {
		st.Size = ptrQuantity(*snap.Status.RestoreSize)
	}
	var p *base.Problem
	switch {
	case s.Terminal:
		st.Phase, p = macvirtv1alpha1.ImageFailed, s.Problem
	case s.Published != nil:
		st.Phase = macvirtv1alpha1.ImageReady
		st.DataSource = &macvirtv1alpha1.NamespacedName{Namespace: s.Published.Namespace, Name: s.Published.Name}
		st.PublishedAs = macvirtv1alpha1.ImagePublishedAsPVC
		if s.Published.Spec.Source.Snapshot != nil {
			st.PublishedAs = macvirtv1alpha1.ImagePublishedAsSnapshot
		}
	case s.Problem != nil && s.Machine == nil && s.Copy == nil:
		st.Phase = macvirtv1alpha1.ImagePending
		p = s.Problem
	case s.Stopping || (s.Machine != nil && s.Copy == nil):
		st.Phase = macvirtv1alpha1.ImageStopping
	case s.Copy != nil && s.Copy.Status.Phase != cdiv1.Succeeded:
		st.Phase = macvirtv1alpha1.ImageCopying
	case s.Copy != nil:
		st.Phase = macvirtv1alpha1.ImagePublishing
	default:
		if st.Phase == "" {
			st.Phase = macvirtv1alpha1.ImagePending
		}
	}
	setConditions(st, img.Generation, s, p)
	return *st
}

// setConditions: Ready once published; while it is not, the reason says
// where the capture stands, and Stalled is True only for a problem that
// needs a human (a terminal failure, a source that is not there).
func setConditions(st *macvirtv1alpha1.MacImageStatus, generation int64, s *imageScope, stalled *base.Problem) {
	if st.Phase == macvirtv1alpha1.ImageReady {
		base.SetSummaryConditions(&st.Conditions, generation, nil,
			fmt.Sprintf("DataSource %s/%s is published; classes use it as image.sourceRef", st.DataSource.Namespace, st.DataSource.Name))
		return
	}
	why := &base.Problem{Reason: macvirtv1alpha1.ReasonStoppingSource, Message: "waiting for the Mac to shut down gracefully"}
	switch {
	case s.Problem != nil:
		why = s.Problem
	case st.Phase == macvirtv1alpha1.ImageCopying:
		why = &base.Problem{Reason: macvirtv1alpha1.ReasonCopying, Message: fmt.Sprintf("CDI is cloning the disk (%s)", st.Copy.Progress)}
	case st.Phase == macvirtv1alpha1.ImagePublishing:
		why = &base.Problem{Reason: macvirtv1alpha1.ReasonPublishing, Message: "the copy is done; snapshotting it and publishing its DataSource"}
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: why.Reason, Message: why.Message, ObservedGeneration: generation})
	meta.SetStatusCondition(&st.Conditions, base.StalledCondition(generation, stalled))
}

// ptrQuantity is q rounded up to whole GiB, as a class's image.size is
// written: a snapshot's restoreSize is in bytes.
func ptrQuantity(q resource.Quantity) *resource.Quantity {
	r := roundUpGi(q)
	return &r
}

// roundUpGi is q rounded up to whole GiB.
func roundUpGi(q resource.Quantity) resource.Quantity {
	const gi = 1 << 30
	n := (q.Value() + gi - 1) / gi
	return *resource.NewQuantity(n*gi, resource.BinarySI)
}
