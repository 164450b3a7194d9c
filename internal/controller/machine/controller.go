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

package machine

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/controller/metrics"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines/status,verbs=patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=macvirt.io,resources=macclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=subresources.kubevirt.io,resources=virtualmachines/stop,verbs=update
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes/source,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=macvirt-system,resources=secrets,verbs=get
// +kubebuilder:rbac:groups=apps,namespace=macvirt-system,resources=controllerrevisions,verbs=get;list;watch;create

// Reconcile gets the machine, runs the ordered ensure functions (the first
// adds the finalizer) or the deletion steps, and patches the status once, computed
// from what was observed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	m := &macvirtv1alpha1.MacMachine{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.killed.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	o := &machineObservation{Now: r.Clock.Now(), Machine: m, Deleting: !m.DeletionTimestamp.IsZero()}
	if killed, _, ok := r.killed.Get(req.NamespacedName, o.Now); ok {
		o.Killed = killed
	}
	o.ListeningSince = r.started
	if r.ListeningSince != nil {
		if t := r.ListeningSince(); t.After(o.ListeningSince) {
			o.ListeningSince = t
		}
	}
	defer func() {
		if reterr != nil && o.WriteFailed == nil && o.StopError == nil {
			// A read or an optimistic write failed: the observation is
			// incomplete, and a status computed from it would be wrong
			// (a Ready machine reported as "disks not requested yet").
			// The error goes back for a retry; the status stays as it was.
			return
		}
		if o.Released {
			// Released for deletion before the class or the VM were read:
			// a status computed now would call the class missing.
			return
		}
		requeue, err := r.patchStatus(ctx, o)
		if err != nil && reterr == nil {
			reterr = err
		}
		if requeue > 0 && (result.RequeueAfter == 0 || requeue < result.RequeueAfter) {
			result.RequeueAfter = requeue
		}
	}()
	if o.Deleting {
		return r.reconcileDelete(ctx, o)
	}
	err := r.reconcileNormal(ctx, o)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		// Nothing can be created in a namespace being deleted, and its
		// deletion deletes the machine (and wakes us); retrying until then
		// would only keep the workers busy.
		ctrl.LoggerFrom(ctx).V(1).Info("namespace is being deleted; waiting for the machine's deletion", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// reconcileNormal runs the ensure functions in order; each records what it
// found in the observation and stops the chain when it cannot go on.
func (r *Reconciler) reconcileNormal(ctx context.Context, o *machineObservation) error {
	return base.RunSteps(ctx, o,
		r.ensureFinalizer,
		r.releaseIfClaimGone,
		r.loadClass,
		r.ensureIdentity,
		r.ensureClassKept,
		r.ensureAgentConfig,
		r.runtimeSteps,
	)
}

// runtimeSteps runs the steps of the class's runtime: KubeVirt's objects,
// or, for a Virtualization class, the placement on a MacHost whose agent
// makes and runs the VM (the operator only observes it).
func (r *Reconciler) runtimeSteps(ctx context.Context, o *machineObservation) (bool, error) {
	if o.Class.Spec.OnHosts() {
		return true, base.RunSteps(ctx, o, r.ensurePlacement, r.observeHost)
	}
	return true, base.RunSteps(ctx, o,
		r.observeObjects,
		r.ensureNetworkPolicy,
		r.ensureDataVolumes,
		r.ensureVirtualMachine,
		r.ensureHostRules,
		r.ensureDomainHookAnnotations,
		r.ensureAgentVolume,
		r.ensureRunState,
	)
}

// patchStatus computes the status from the observation and writes it once,
// only if it changed, with an event when the phase changed.
func (r *Reconciler) patchStatus(ctx context.Context, o *machineObservation) (time.Duration, error) {
	m := o.Machine
	r.reportForcedPowerOff(o)
	computed := computeStatus(*o)
	if equality.Semantic.DeepEqual(m.Status, computed.Status) {
		r.forgetKilled(o)
		return computed.RequeueAfter, nil
	}
	before := m.DeepCopy()
	oldPhase := m.Status.Phase
	m.Status = computed.Status
	if written, err := base.WriteStatus(ctx, r.Client, m, before, false); !written {
		return 0, err
	}
	r.forgetKilled(o)
	if oldPhase != computed.Status.Phase {
		metrics.MachinePhaseTransitions.WithLabelValues(string(computed.Status.Phase)).Inc()
		metrics.ObservePhaseDurations(&before.Status, m, o.Now)
		r.recordPhase(m)
	}
	if reason, note, ok := base.TurnedStalled(before.Status.Conditions, m.Status.Conditions); ok {
		if reason == macvirtv1alpha1.ReasonStopFailed {
			metrics.StopFailures.WithLabelValues(m.Namespace).Inc()
		}
		// The moment a human is needed is a Warning event; refused writes,
		// failed machines, launch, disk and ownership problems and forced
		// power-offs have their own.
		if o.WriteFailed == nil && m.Status.Phase != macvirtv1alpha1.MachineFailed && !launchStalledReasons[reason] &&
			!stalledDiskReasons[reason] && reason != macvirtv1alpha1.ReasonNotOwned && reason != macvirtv1alpha1.ReasonForcedPowerOff {
			base.RecordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Reconcile", note)
		}
	}
	if reason, note, ok := launchWarning(&before.Status, &m.Status); ok && r.Recorder != nil {
		base.RecordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Start", note)
	}
	r.recordDiskProblem(before, m)
	r.recordNotOwned(before, m)
	r.recordDrain(before, m)
	return computed.RequeueAfter, nil
}

// SetupWithManager registers the controller: it owns VMs and DataVolumes,
// follows VMIs through their VM's name, follows VMs, VMIs and DataVolumes
// it does not control that are named like a machine's (so the machine goes
// on once they are gone), and follows class changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.started = r.Clock.Now()
	if r.Classes.Classes == nil {
		r.Classes.Classes = r.Client
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacMachine{}).
		Owns(&kubevirtv1.VirtualMachine{}).
		Owns(&cdiv1.DataVolume{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(r.vmiToMachine),
			builder.WithPredicates(predicate.NewPredicateFuncs(hasMachineLabel))).
		Watches(&kubevirtv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(r.namesakeMachine)).
		Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.namesakeMachine)).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(r.namesakeMachine),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return !hasMachineLabel(o) }))).
		Watches(&macvirtv1alpha1.MacClass{}, handler.EnqueueRequestsFromMapFunc(r.classToMachines)).
		Watches(&macvirtv1alpha1.MacClaim{}, handler.EnqueueRequestsFromMapFunc(r.claimToMachines)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)})
	if r.WatchHosts {
		b = b.Watches(&macvirtv1alpha1.MacHost{}, handler.EnqueueRequestsFromMapFunc(r.hostToMachines))
	}
	if r.ControllerName != "" {
		b = b.Named(r.ControllerName)
	} else {
		b = b.Named("macmachine")
	}
	return b.Complete(r)
}

func hasMachineLabel(o client.Object) bool {
	return o.GetLabels()[macvirtv1alpha1.LabelMachine] != ""
}

// vmiToMachine maps a VMI to its machine: the VMI carries the machine label
// from the VM template.
func (r *Reconciler) vmiToMachine(_ context.Context, o client.Object) []reconcile.Request {
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[macvirtv1alpha1.LabelMachine]}
	if vmi, ok := o.(*kubevirtv1.VirtualMachineInstance); ok && isKilledByStop(vmi) {
		// Kept until the machine's status records it: the instance may be
		// gone from the cache before the machine is reconciled.
		r.killed.Assume(key, vmi.DeepCopy(), r.now(), base.UntilForgotten)
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// claimToMachines maps a claim (also its deletion) to the machine bound to it.
func (r *Reconciler) claimToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	return machinesIndexed(ctx, r.Client, index.MachineClaimUID, string(o.GetUID()))
}

// hostToMachines maps a MacHost's change to the machines placed on it
// (lost, back) and to the machines that wait for a host (a slot freed, a
// host registered or uncordoned).
func (r *Reconciler) hostToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := machinesIndexed(ctx, r.Client, index.MachineHost, o.GetName())
	list := &macvirtv1alpha1.MacMachineList{}
	if err := r.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing machines waiting for a MacHost")
		return reqs
	}
	for i := range list.Items {
		m := &list.Items[i]
		if c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady); m.Spec.HostName == "" && c != nil &&
			c.Reason == macvirtv1alpha1.ReasonNoHostAvailable {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		}
	}
	return reqs
}

func (r *Reconciler) classToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	return machinesIndexed(ctx, r.Client, index.MachineClass, o.GetName())
}

// namesakeMachine maps an object whose controller is not a machine to the
// machine whose VM (or DataVolume) it is named like, when that machine
// exists: the machine reports it, and goes on once it is deleted or renamed.
// The machine's own objects reach it through their controller reference.
func (r *Reconciler) namesakeMachine(ctx context.Context, obj client.Object) []reconcile.Request {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kindMachine &&
		strings.HasPrefix(ref.APIVersion, macvirtv1alpha1.GroupVersion.Group+"/") {
		return nil
	}
	name := obj.GetName()
	if _, ok := obj.(*cdiv1.DataVolume); ok {
		var found bool
		if name, found = machineOfDataVolume(name); !found {
			return nil
		}
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}
	if err := r.Get(ctx, key, &macvirtv1alpha1.MacMachine{}); err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
