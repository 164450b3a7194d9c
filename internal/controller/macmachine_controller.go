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

package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/internal/vmstop"
)

// classNameField indexes MacMachines by spec.className, so a class change
// reaches its machines.
const classNameField = "spec.className"

// MacMachineReconciler turns a MacMachine into a KubeVirt VirtualMachine and
// CDI DataVolumes, walks it through its phases, stops it gracefully and
// deletes it safely.
type MacMachineReconciler struct {
	client.Client
	// APIReader reads uncached, for Secrets the cache does not hold.
	APIReader client.Reader
	// Classes finds the class a machine is made of: its live class, or the
	// snapshot of its revision once the class changed or went. Its
	// snapshot reader should be a cache (operator.Setup makes one): bound
	// machines of an old revision read theirs on every reconcile. Reads
	// classes through Client when unset, and no snapshots.
	Classes classhistory.Resolver
	// Recorder records events on phase changes.
	Recorder events.EventRecorder
	// Stopper requests graceful stops through KubeVirt's stop subresource.
	Stopper vmstop.Stopper
	// Render holds operator-wide render settings (hook image, emulator).
	Render render.Options
	// DomainHook, when set, says whether the objects of the domain-hook
	// transport are in place (nil when they are); a VM is neither created
	// nor started while it returns an error.
	DomainHook func() error
	// Agent is what machines' agent config disks say about the endpoint.
	Agent AgentOptions
	// Clock is the time source for boot and heartbeat timeouts.
	Clock clock.PassiveClock
	// ListeningSince reports when the agent endpoint began to listen (zero
	// while it does not). Timeouts never run from before it, nor from before
	// the controller started (which stands in for it when nil or zero).
	ListeningSince func() time.Time

	started time.Time
	// ControllerName overrides the controller's name, so tests can run
	// several managers in one process.
	ControllerName string

	// killed holds, per machine, an instance the watch saw KubeVirt kill at
	// the end of a graceful stop, until the machine's status records it.
	killed sync.Map
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=macvirt.io,resources=macclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=macvirt.io,resources=macclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;update;patch;delete
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
func (r *MacMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	m := &macvirtv1alpha1.MacMachine{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.killed.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	o := &machineObservation{Now: r.Clock.Now(), Machine: m, Deleting: !m.DeletionTimestamp.IsZero()}
	if killed, ok := r.killed.Load(req.NamespacedName); ok {
		o.Killed = killed.(*kubevirtv1.VirtualMachineInstance)
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
func (r *MacMachineReconciler) reconcileNormal(ctx context.Context, o *machineObservation) error {
	for _, step := range []func(context.Context, *machineObservation) (bool, error){
		r.ensureFinalizer,
		r.releaseIfClaimGone,
		r.loadClass,
		r.ensureIdentity,
		r.ensureClassKept,
		r.ensureAgentConfig,
		r.observeObjects,
		r.ensureNetworkPolicy,
		r.ensureDataVolumes,
		r.ensureVirtualMachine,
		r.ensureHostRules,
		r.ensureDomainHookAnnotations,
		r.ensureAgentVolume,
		r.ensureRunState,
	} {
		if proceed, err := step(ctx, o); err != nil || !proceed {
			return err
		}
	}
	return nil
}

// ensureFinalizer answers: will the machine's deletion wait for a graceful
// stop? Nothing is created before it does; a refused patch shows in status.
func (r *MacMachineReconciler) ensureFinalizer(ctx context.Context, o *machineObservation) (bool, error) {
	m := o.Machine
	if controllerutil.ContainsFinalizer(m, macvirtv1alpha1.MachineFinalizer) {
		return true, nil
	}
	patch := client.MergeFrom(m.DeepCopy())
	controllerutil.AddFinalizer(m, macvirtv1alpha1.MachineFinalizer)
	if err := r.Patch(ctx, m, patch); err != nil {
		controllerutil.RemoveFinalizer(m, macvirtv1alpha1.MachineFinalizer)
		return false, r.updateFailed(o, fmt.Errorf("adding finalizer %s: %w", macvirtv1alpha1.MachineFinalizer, err))
	}
	return true, nil
}

// forgetKilled drops the killed instance the watch kept for the machine
// once its status, as written, records the forced power-off (the condition
// keeps it from then on), or once the machine is to run again.
func (r *MacMachineReconciler) forgetKilled(o *machineObservation) {
	if o.Killed == nil {
		return
	}
	c := meta.FindStatusCondition(o.Machine.Status.Conditions, macvirtv1alpha1.ConditionReady)
	if (c != nil && c.Reason == macvirtv1alpha1.ReasonForcedPowerOff) || (wantsRunning(o.Machine) && !o.Deleting) {
		r.killed.Delete(client.ObjectKeyFromObject(o.Machine))
	}
}

// patchStatus computes the status from the observation and writes it once,
// only if it changed, with an event when the phase changed.
func (r *MacMachineReconciler) patchStatus(ctx context.Context, o *machineObservation) (time.Duration, error) {
	m := o.Machine
	r.reportForcedPowerOff(o)
	computed := computeMachineStatus(*o)
	if equality.Semantic.DeepEqual(m.Status, computed.Status) {
		r.forgetKilled(o)
		return computed.RequeueAfter, nil
	}
	before := m.DeepCopy()
	oldPhase := m.Status.Phase
	m.Status = computed.Status
	if written, err := writeStatus(ctx, r.Client, m, before, false); !written {
		return 0, err
	}
	r.forgetKilled(o)
	if oldPhase != computed.Status.Phase {
		machinePhaseTransitions.WithLabelValues(string(computed.Status.Phase)).Inc()
		observePhaseDurations(&before.Status, m, o.Now)
		r.recordPhase(m)
	}
	if reason, note, ok := turnedStalled(before.Status.Conditions, m.Status.Conditions); ok {
		if reason == macvirtv1alpha1.ReasonStopFailed {
			stopFailures.WithLabelValues(m.Namespace).Inc()
		}
		// The moment a human is needed is a Warning event; refused writes,
		// failed machines, launch, disk and ownership problems and forced
		// power-offs have their own.
		if o.WriteFailed == nil && m.Status.Phase != macvirtv1alpha1.MachineFailed && !launchStalledReasons[reason] &&
			!stalledDiskReasons[reason] && reason != macvirtv1alpha1.ReasonNotOwned && reason != macvirtv1alpha1.ReasonForcedPowerOff {
			recordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Reconcile", note)
		}
	}
	if reason, note, ok := launchWarning(&before.Status, &m.Status); ok && r.Recorder != nil {
		recordEvent(r.Recorder, m, corev1.EventTypeWarning, reason, "Start", note)
	}
	r.recordDiskProblem(before, m)
	r.recordNotOwned(before, m)
	r.recordDrain(before, m)
	return computed.RequeueAfter, nil
}

func (r *MacMachineReconciler) recordPhase(m *macvirtv1alpha1.MacMachine) {
	if r.Recorder == nil {
		return
	}
	eventType := corev1.EventTypeNormal
	if m.Status.Phase == macvirtv1alpha1.MachineFailed {
		eventType = corev1.EventTypeWarning
	}
	note := string(m.Status.Phase)
	for _, c := range m.Status.Conditions {
		if c.Type == macvirtv1alpha1.ConditionReady {
			note = fmt.Sprintf("%s: %s", m.Status.Phase, c.Message)
		}
	}
	recordEvent(r.Recorder, m, eventType, "Machine"+string(m.Status.Phase), "Reconcile", note)
}

// SetupWithManager registers the controller: it owns VMs and DataVolumes,
// follows VMIs through their VM's name, follows VMs, VMIs and DataVolumes
// it does not control that are named like a machine's (so the machine goes
// on once they are gone), and follows class changes.
func (r *MacMachineReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
		Watches(&macvirtv1alpha1.MacClaim{}, handler.EnqueueRequestsFromMapFunc(r.claimToMachines))
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
func (r *MacMachineReconciler) vmiToMachine(_ context.Context, o client.Object) []reconcile.Request {
	key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[macvirtv1alpha1.LabelMachine]}
	if vmi, ok := o.(*kubevirtv1.VirtualMachineInstance); ok && isKilledByStop(vmi) {
		// Kept until the machine's status records it: the instance may be
		// gone from the cache before the machine is reconciled.
		r.killed.Store(key, vmi.DeepCopy())
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// claimToMachines maps a claim (also its deletion) to the machine bound to it.
func (r *MacMachineReconciler) claimToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.MatchingFields{claimUIDField: string(o.GetUID())}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the machine bound to a claim; it waits for its next event", "claim", client.ObjectKeyFromObject(o))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func (r *MacMachineReconciler) classToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	var list macvirtv1alpha1.MacMachineList
	if err := r.List(ctx, &list, client.MatchingFields{classNameField: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing machines of class", "class", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
