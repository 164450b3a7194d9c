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
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macimages,verbs=list;watch;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macimages/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macimages/finalizers,verbs=update
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datasources,verbs=list;watch;create;update
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshots,verbs=list;watch;create
// +kubebuilder:rbac:groups=snapshot.storage.k8s.io,resources=volumesnapshotclasses,verbs=list;watch

// finalizer holds a MacImage until the Mac it stopped runs again.
const finalizer = "macvirt.io/image"

// recheck is how often a capture waiting on something no watch reports
// (a claim that is not bound yet) is looked at again.
const recheck = 10 * time.Second

// Reconcile finds the Mac, stops it, copies its disk, starts it again and
// publishes the copy; it writes the status once, computed from what it saw.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	img := &macvirtv1alpha1.MacImage{}
	if err := r.Get(ctx, req.NamespacedName, img); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &imageScope{Image: img}
	if !img.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if _, err := base.EnsureFinalizer(ctx, r.Client, img, finalizer); err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil && reterr == nil {
			result, reterr = ctrl.Result{}, err
		}
	}()
	if err := base.RunSteps(ctx, s,
		r.findSource,
		r.observeCopy,
		r.stopSource,
		r.ensureCopy,
		r.restartSource,
		r.ensureSnapshot,
		r.ensureDataSource,
	); err != nil {
		return ctrl.Result{}, err
	}
	if s.Terminal {
		// Whatever failed, the Mac this capture stopped runs again.
		return ctrl.Result{}, r.releaseSource(ctx, s)
	}
	if s.Problem != nil {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	return ctrl.Result{}, nil
}

// finalize starts the Mac again if this capture stopped it, then lets the
// MacImage go; its copy, snapshot and DataSource are its own and the
// garbage collector removes them.
func (r *Reconciler) finalize(ctx context.Context, s *imageScope) (ctrl.Result, error) {
	if err := r.findMachine(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseSource(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	_, err := base.RemoveFinalizer(ctx, r.Client, s.Image, finalizer)
	return ctrl.Result{}, err
}

// patchStatus writes the computed status, only if it changed, with an
// event when the capture stalls or is done.
func (r *Reconciler) patchStatus(ctx context.Context, s *imageScope) error {
	st := computeImageStatus(s)
	img := s.Image
	if equality.Semantic.DeepEqual(img.Status, st) {
		return nil
	}
	before := img.DeepCopy()
	img.Status = st
	if written, err := base.WriteStatus(ctx, r.Client, img, before, false); !written {
		return err
	}
	if reason, note, ok := base.TurnedStalled(before.Status.Conditions, st.Conditions); ok {
		base.RecordEvent(r.Recorder, img, corev1.EventTypeWarning, reason, "Capture", note)
	}
	if st.Phase != before.Status.Phase && st.Phase == macvirtv1alpha1.ImageReady {
		base.RecordEvent(r.Recorder, img, corev1.EventTypeNormal, macvirtv1alpha1.ReasonPublished, "Capture",
			fmt.Sprintf("published DataSource %s/%s (%s)", st.DataSource.Namespace, st.DataSource.Name, st.PublishedAs))
	}
	return nil
}

// SetupWithManager watches images, what they make, and the machines they
// capture.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.ControllerName
	if name == "" {
		name = "macimage"
	}
	owned := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &macvirtv1alpha1.MacImage{}, handler.OnlyControllerOwner())
	b := ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacImage{}).
		Watches(&cdiv1.DataVolume{}, owned).
		Watches(&cdiv1.DataSource{}, owned).
		Watches(&macvirtv1alpha1.MacMachine{}, handler.EnqueueRequestsFromMapFunc(r.machineToImages))
	// CSI snapshots are optional in a cluster: without their API the
	// copies are published as PVCs, and nothing waits on a watch that
	// could never start.
	gk := schema.GroupKind{Group: snapshotv1.GroupName, Kind: "VolumeSnapshot"}
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, snapshotv1.SchemeGroupVersion.Version); err == nil {
		r.snapshots = true
		b = b.Watches(&snapshotv1.VolumeSnapshot{}, owned)
	} else {
		ctrl.Log.WithName("macimage").Info("the cluster serves no VolumeSnapshots; captured images are published as PVCs", "reason", err.Error())
	}
	return b.Named(name).Complete(r)
}

// machineToImages enqueues the captures of a machine: the one its
// annotation names, and those that recorded it.
func (r *Reconciler) machineToImages(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	if name := o.GetAnnotations()[macvirtv1alpha1.AnnotationCapture]; name != "" {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	var list macvirtv1alpha1.MacImageList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing MacImages for a machine")
		return out
	}
	for i := range list.Items {
		img := &list.Items[i]
		if m := img.Status.Machine; m != nil && m.Namespace == o.GetNamespace() && m.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: img.Name}})
			continue
		}
		if c := img.Spec.Source.Claim; c != nil && img.Status.Machine == nil {
			// Not found yet: a machine that binds may be its claim's.
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: img.Name}})
		}
	}
	return out
}
