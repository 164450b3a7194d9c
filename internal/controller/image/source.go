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
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/render"
)

// findMachine finds the Mac to capture: the one recorded in status once
// found (by UID: a new machine of the same name is another Mac), else the
// claim's bound machine or the machine named. s.Machine stays nil, with a
// problem, when there is none.
func (r *Reconciler) findMachine(ctx context.Context, s *imageScope) error {
	img := s.Image
	if rec := img.Status.Machine; rec != nil {
		m := &macvirtv1alpha1.MacMachine{}
		if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Namespace: rec.Namespace, Name: rec.Name}, m); err != nil {
			return err
		}
		if m.Name == "" || m.UID != rec.UID {
			s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotFound,
				Message: fmt.Sprintf("MacMachine %s/%s, the Mac being captured, is gone", rec.Namespace, rec.Name)}
			return nil
		}
		s.Machine = m
		return nil
	}
	key := types.NamespacedName{}
	switch src := img.Spec.Source; {
	case src.Claim != nil:
		claim := &macvirtv1alpha1.MacClaim{}
		ck := types.NamespacedName{Namespace: src.Claim.Namespace, Name: src.Claim.Name}
		if err := base.GetOptional(ctx, r.Client, ck, claim); err != nil {
			return err
		}
		if claim.Name == "" {
			s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotFound, Message: fmt.Sprintf("MacClaim %s does not exist", ck)}, true
			return nil
		}
		if newer(claim, img) {
			s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable, Message: fmt.Sprintf(
				"MacClaim %s was created after this MacImage, so it is not the claim admission checked; capture it under a new MacImage", ck)}, true
			return nil
		}
		ref := claim.Status.MachineRef
		if ref == nil {
			s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotFound,
				Message: fmt.Sprintf("MacClaim %s is not bound to a machine; capture it once kubectl get macclaim shows it Bound", ck)}, true
			return nil
		}
		key = types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	case src.Machine != nil:
		key = types.NamespacedName{Namespace: src.Machine.Namespace, Name: src.Machine.Name}
	}
	m := &macvirtv1alpha1.MacMachine{}
	if err := base.GetOptional(ctx, r.Client, key, m); err != nil {
		return err
	}
	if m.Name == "" {
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotFound, Message: fmt.Sprintf("MacMachine %s does not exist", key)}, true
		return nil
	}
	if newer(m, img) {
		// A Mac made after the capture was admitted, under the name it
		// named, is not the Mac admission checked.
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable, Message: fmt.Sprintf(
			"MacMachine %s was created after this MacImage, so it is not the Mac admission checked; capture it under a new MacImage", key)}, true
		return nil
	}
	s.Machine = m
	return nil
}

// newer reports an object created after the MacImage (both stamped by the
// API server, to the second).
func newer(o metav1.Object, img *macvirtv1alpha1.MacImage) bool {
	return o.GetCreationTimestamp().After(img.CreationTimestamp.Time)
}

// findSource finds the Mac and its system disk, and says whether it can be
// captured: not being deleted, not Failed, its disk provisioned.
func (r *Reconciler) findSource(ctx context.Context, s *imageScope) (bool, error) {
	if err := r.findMachine(ctx, s); err != nil || s.Machine == nil {
		return false, err
	}
	m, img := s.Machine, s.Image
	switch {
	case !m.DeletionTimestamp.IsZero():
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable,
			Message: fmt.Sprintf("MacMachine %s/%s is being deleted", m.Namespace, m.Name)}, true
		return false, nil
	case m.Status.Phase == macvirtv1alpha1.MachineFailed:
		s.Problem, s.Terminal = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable,
			Message: fmt.Sprintf("MacMachine %s/%s is Failed; capture a working Mac", m.Namespace, m.Name)}, true
		return false, nil
	}
	dv := &cdiv1.DataVolume{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Namespace: m.Namespace, Name: render.SystemDataVolumeName(m)}, dv); err != nil {
		return false, err
	}
	if dv.Name == "" || dv.Status.Phase != cdiv1.Succeeded {
		s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable,
			Message: fmt.Sprintf("MacMachine %s/%s has no provisioned system disk yet", m.Namespace, m.Name)}
		return false, nil
	}
	s.Source = dv
	if sc := ptr.Deref(img.Spec.StorageClassName, ""); sc != "" {
		class := &storagev1.StorageClass{}
		if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: sc}, class); err != nil {
			return false, err
		}
		if class.Name == "" {
			s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable,
				Message: fmt.Sprintf("StorageClass %s (spec.storageClassName) does not exist; the Mac is not stopped for a copy that cannot be made", sc)}
			return false, nil
		}
	}
	// Never stop a Mac for a copy that has nowhere to go.
	ns := &corev1.Namespace{}
	if err := base.GetOptional(ctx, r.Client, types.NamespacedName{Name: r.ImagesNamespace}, ns); err != nil {
		return false, err
	}
	if ns.Name == "" {
		s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonSourceNotCapturable,
			Message: fmt.Sprintf("the images namespace %s does not exist: create it (kubectl create namespace %s)", r.ImagesNamespace, r.ImagesNamespace)}
		return false, nil
	}
	return true, nil
}

// stopSource stops the Mac gracefully before its disk is copied, marking it
// as stopped for this capture; it waits for the machine to report Stopped
// (the instance gone), never copying a running disk.
func (r *Reconciler) stopSource(ctx context.Context, s *imageScope) (bool, error) {
	m, name := s.Machine, s.Image.Name
	if copyDone(s.Copy) {
		return true, nil
	}
	if other := m.Annotations[macvirtv1alpha1.AnnotationCapture]; other != "" && other != name {
		// Its capture starts the Mac again when its copy is done, which
		// must not be while this one copies.
		s.Problem = &base.Problem{Reason: macvirtv1alpha1.ReasonStoppingSource,
			Message: fmt.Sprintf("MacImage %s is capturing MacMachine %s/%s; this capture waits for it", other, m.Namespace, m.Name)}
		return false, nil
	}
	if running := ptr.Deref(m.Spec.Running, true); running {
		patch := client.MergeFrom(m.DeepCopy())
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[macvirtv1alpha1.AnnotationCapture] = name
		m.Spec.Running = ptr.To(false)
		if err := r.Patch(ctx, m, patch); err != nil {
			return false, fmt.Errorf("stopping MacMachine %s/%s to capture it: %w", m.Namespace, m.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("stopping the Mac to capture it", "machine", client.ObjectKeyFromObject(m))
	}
	if m.Status.Phase != macvirtv1alpha1.MachineStopped {
		s.Stopping = true
		return false, nil
	}
	return true, nil
}

// restartSource starts the Mac again once its disk is copied.
func (r *Reconciler) restartSource(ctx context.Context, s *imageScope) (bool, error) {
	return true, r.releaseSource(ctx, s)
}

// releaseSource starts the Mac again if this capture stopped it: the
// annotation says so, and goes in the same write.
func (r *Reconciler) releaseSource(ctx context.Context, s *imageScope) error {
	m := s.Machine
	if m == nil || m.Annotations[macvirtv1alpha1.AnnotationCapture] != s.Image.Name {
		return nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	delete(m.Annotations, macvirtv1alpha1.AnnotationCapture)
	if m.Labels[macvirtv1alpha1.LabelReleased] == "" && m.DeletionTimestamp.IsZero() {
		// Released meanwhile (its claim gone, Retain) or being deleted:
		// it stays stopped.
		m.Spec.Running = ptr.To(true)
	}
	if err := r.Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("starting MacMachine %s/%s again after the capture: %w", m.Namespace, m.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("started the Mac again after copying its disk", "machine", client.ObjectKeyFromObject(m))
	return nil
}

// copyDone says the copy no longer needs the source disk.
func copyDone(dv *cdiv1.DataVolume) bool {
	return dv != nil && dv.Status.Phase == cdiv1.Succeeded
}
