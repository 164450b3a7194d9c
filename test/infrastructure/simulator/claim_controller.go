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
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// What kube-controller-manager and a CSI provisioner do to claims, which
// envtest runs neither of: the PV controller and provisioner bind a claim
// (pkg/controller/volume/persistentvolume/pv_controller.go, syncUnboundClaim,
// bindVolumeToClaim; external-provisioner), the pvc-protection controller
// lets a deleted claim go once no pod uses it
// (pkg/controller/volume/pvcprotection), and the garbage collector deletes
// the PVC of a DataVolume that is gone. The simulator makes no
// PersistentVolumes: a bound claim names none.

// Annotations the PV controller and the scheduler put on claims
// (pkg/controller/volume/persistentvolume/util, AnnBindCompleted and
// friends).
const (
	annBindCompleted        = "pv.kubernetes.io/bind-completed"
	annBoundByController    = "pv.kubernetes.io/bound-by-controller"
	annStorageProvisioner   = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvision = "volume.beta.kubernetes.io/storage-provisioner"
	annSelectedNode         = "volume.kubernetes.io/selected-node"

	// finalizerPVCProtection is the finalizer the API server's
	// StorageObjectInUseProtection admission puts on every claim.
	finalizerPVCProtection = "kubernetes.io/pvc-protection"
)

// bindClaim binds pvc as the PV controller does once a volume is
// provisioned for it: bind-completed and the provisioner in its
// annotations, then phase Bound with its access modes and a capacity of
// what it requests.
func (s *Simulator) bindClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, provisioner string) error {
	if pvc.Status.Phase == corev1.ClaimBound {
		return nil
	}
	ann := map[string]string{annBindCompleted: "yes", annBoundByController: "yes"}
	if provisioner != "" {
		ann[annStorageProvisioner], ann[annBetaStorageProvision] = provisioner, provisioner
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if err := s.client.Patch(ctx, pvc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("annotating PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.AccessModes = slices.Clone(pvc.Spec.AccessModes)
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
	if err := s.client.Status().Update(ctx, pvc); err != nil {
		return fmt.Errorf("binding PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// claimReconciler stands in for the provisioner and the claim controllers
// of kube-controller-manager.
type claimReconciler struct {
	sim *Simulator
}

func (r *claimReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-pvc").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		WatchesRawSource(sourceOfClaims(mgr, r.sim)).
		// A deleted DataVolume's PVC goes with it.
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(sameName)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up PVC simulator: %w", err)
	}
	return nil
}

// sameName maps a DataVolume to its PVC, which shares its name.
func sameName(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
}

// sourceOfClaims is the watch of claims, with forgetDeleted's handler.
func sourceOfClaims(mgr ctrl.Manager, s *Simulator) source.Source {
	return source.Kind(mgr.GetCache(), &corev1.PersistentVolumeClaim{}, handler.TypedEventHandler[*corev1.PersistentVolumeClaim, reconcile.Request](&forgetDeleted{sim: s}))
}

// forgetDeleted drops what a deleted claim held: the volume is gone with
// it (claims are made by the DataVolume controllers with reclaim policy
// Delete, the provisioners' default).
type forgetDeleted struct {
	handler.TypedEnqueueRequestForObject[*corev1.PersistentVolumeClaim]
	sim *Simulator
}

func (h *forgetDeleted) Delete(ctx context.Context, e event.TypedDeleteEvent[*corev1.PersistentVolumeClaim],
	q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.sim.volumes.remove(e.Object.GetUID())
	h.TypedEnqueueRequestForObject.Delete(ctx, e, q)
}

// Reconcile lets a deleted claim go once unused, deletes the claim of a
// DataVolume that is gone, and binds a claim no DataVolume drives when a
// provisioner would.
func (r *claimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp != nil {
		return r.release(ctx, pvc)
	}
	if owner := metav1.GetControllerOf(pvc); owner != nil && owner.Kind == "DataVolume" {
		gone, err := r.ownerGone(ctx, pvc.Namespace, owner)
		if err != nil || !gone {
			return ctrl.Result{}, err
		}
		err = r.sim.client.Delete(ctx, pvc, client.Preconditions{UID: ptr.To(pvc.UID)},
			client.PropagationPolicy(metav1.DeletePropagationBackground))
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if _, ok := pvc.Annotations[annCreatedForDataVolume]; ok || pvc.Spec.VolumeName != "" || pvc.Status.Phase == corev1.ClaimBound {
		// The DataVolume's steps bind it; a pre-bound claim waits for its
		// volume, which only the PV controller binds.
		return ctrl.Result{}, nil
	}
	provisioner, ok, err := r.provisionerFor(ctx, pvc)
	if err != nil || !ok {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.sim.bindClaim(ctx, pvc, provisioner)
}

// provisionerFor says whether a provisioner binds the claim now, and
// which: the claim's class's, unless the class is missing, has no
// provisioner, or binds on first consumer and no node was selected. A
// claim of no class (one made while the cluster had no default class) is
// bound too: the simulator stands in for a default provisioner.
func (r *claimReconciler) provisionerFor(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, bool, error) {
	name := pvc.Spec.StorageClassName
	if name == nil {
		return "", true, nil
	}
	sc, err := r.sim.storageClassNamed(ctx, name, false)
	if err != nil || sc == nil || sc.Provisioner == provisionerNone {
		return "", false, err
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer &&
		pvc.Annotations[annSelectedNode] == "" {
		return "", false, nil
	}
	return sc.Provisioner, true, nil
}

// ownerGone reports whether no DataVolume with the reference's UID exists.
func (r *claimReconciler) ownerGone(ctx context.Context, ns string, ref *metav1.OwnerReference) (bool, error) {
	dv := &cdiv1.DataVolume{}
	err := r.sim.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, dv)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return dv.UID != ref.UID, nil
}

// release removes the pvc-protection finalizer of a deleted claim that no
// unfinished pod bound to a node uses (kube-controller-manager's
// pvc-protection controller, pkg/controller/volume/pvcprotection:
// isBeingUsed, podUsesPVC).
func (r *claimReconciler) release(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (ctrl.Result, error) {
	if !slices.Contains(pvc.Finalizers, finalizerPVCProtection) {
		return ctrl.Result{}, nil
	}
	users, err := r.sim.podsUsingClaim(ctx, pvc.Namespace, pvc.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, p := range users {
		// Only a pod bound to a node holds the claim (podUsesPVC).
		if p.Spec.NodeName != "" {
			return ctrl.Result{RequeueAfter: r.sim.opts.StepInterval}, nil
		}
	}
	before := pvc.DeepCopy()
	pvc.Finalizers = slices.DeleteFunc(pvc.Finalizers, func(f string) bool { return f == finalizerPVCProtection })
	return ctrl.Result{}, client.IgnoreNotFound(r.sim.client.Patch(ctx, pvc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// podsUsingClaim lists the unfinished pods of namespace ns with a volume
// on the claim.
func (s *Simulator) podsUsingClaim(ctx context.Context, ns, claim string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing pods using PVC %s/%s: %w", ns, claim, err)
	}
	var users []corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if podDone(p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
				users = append(users, *p)
				break
			}
		}
	}
	return users, nil
}
