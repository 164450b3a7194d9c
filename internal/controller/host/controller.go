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

package host

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1 "k8s.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=machosts,verbs=list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=machosts/status,verbs=patch

// Reconcile reads the host, counts its machines, and writes the status
// once, computed from what it read.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	h := &macvirtv1alpha1.MacHost{}
	if err := r.Get(ctx, req.NamespacedName, h); err != nil {
		if apierrors.IsNotFound(err) {
			r.beats.Forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.Clock.Now()
	s := &scope{Now: now, Host: h, BeatSeenAt: r.seenAt(h, now)}
	defer func() {
		if !s.Observed {
			return
		}
		requeue, err := r.patchStatus(ctx, s)
		if err != nil && reterr == nil {
			reterr = err
		}
		if requeue > 0 {
			result.RequeueAfter = requeue
		}
	}()
	return ctrl.Result{}, base.RunSteps(ctx, s, r.countMachines)
}

// patchStatus writes the computed status when it changed, with an event
// when the host turns lost or comes back.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) (time.Duration, error) {
	h := s.Host
	computed := computeHostStatus(s)
	if equality.Semantic.DeepEqual(h.Status, computed.Status) {
		return computed.RequeueAfter, nil
	}
	before := h.DeepCopy()
	h.Status = computed.Status
	if written, err := base.WriteStatus(ctx, r.Client, h, before, false); !written {
		return 0, err
	}
	was := meta.FindStatusCondition(before.Status.Conditions, macvirtv1alpha1.ConditionReady)
	now := meta.FindStatusCondition(h.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if was == nil || was.Reason != now.Reason {
		eventType := corev1.EventTypeNormal
		if now.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		base.RecordEvent(r.Recorder, h, eventType, now.Reason, "Observe", now.Message)
	}
	return computed.RequeueAfter, nil
}

// SetupWithManager registers the controller: it follows hosts, and the
// machines placed on them (a placement or a deletion changes the count).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	name := r.ControllerName
	if name == "" {
		name = "machost"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacHost{}).
		Watches(&macvirtv1alpha1.MacMachine{}, handler.EnqueueRequestsFromMapFunc(machineToHost)).
		Named(name).
		Complete(r)
}

func machineToHost(_ context.Context, o client.Object) []reconcile.Request {
	if h := o.(*macvirtv1alpha1.MacMachine).Spec.HostName; h != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: h}}}
	}
	return nil
}
