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

package nodeslots

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/render"
)

// Reconciler advertises the macOS licence slots of every
// Apple-hardware node as the node resource macvirt.io/macos-slots, in the
// Node's status capacity and allocatable, and puts them back whenever
// anything else changed them: a kubelet that re-registered its Node (a new
// Node object carries none) or that found no device-manager checkpoint on
// restart (it zeroes every extended resource, reconcileExtendedResource).
// A node that is no longer labelled as Apple hardware loses the resource.
//
// A controller rather than a device plugin: slots are a licence count, not
// a device a container is given, so nothing needs to run on the node (no
// privileged DaemonSet, no kubelet socket), the count is set where admins
// already label their nodes, and the whole behaviour runs, and is tested,
// against a plain API server. See docs/licensing.md.
type Reconciler struct {
	client.Client
	// Recorder records a Warning event on a node whose slot setting is
	// invalid, or whose status write was refused.
	Recorder events.EventRecorder
	// ControllerName overrides the controller's name, so tests can run
	// several managers in one process.
	ControllerName string

	// warned holds, per node and reason ("node/reason"), the note of the
	// last warning recorded, so each is given once; events are not read
	// back.
	warned base.Assumed[string, string]
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=macvirt.io,resources=macmachines,verbs=get;list;watch

// nodeScope is what one reconcile of a node read and decided.
type nodeScope struct {
	Node  *corev1.Node
	Held  heldSlots
	Slots nodeSlots
}

// Reconcile reads the node, decides its slots, and writes them when they
// differ, in one status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &nodeScope{Node: &corev1.Node{}}
	if err := r.Get(ctx, req.NamespacedName, s.Node); err != nil {
		if apierrors.IsNotFound(err) {
			// A Node registered again under this name is warned afresh.
			for _, reason := range []string{"InvalidMacOSSlots", "MacOSSlotsAdjusted"} {
				r.warned.Forget(req.Name + "/" + reason)
			}
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, base.RunSteps(ctx, s, r.countHeldSlots, r.decideSlots, r.advertiseSlots)
}

// countHeldSlots answers: how many slots do the macOS VMs on the node hold?
func (r *Reconciler) countHeldSlots(ctx context.Context, s *nodeScope) (bool, error) {
	var list kubevirtv1.VirtualMachineInstanceList
	if err := r.List(ctx, &list, client.MatchingFields{index.InstanceNode: s.Node.Name}); err != nil {
		return false, fmt.Errorf("listing the VirtualMachineInstances on node %s: %w", s.Node.Name, err)
	}
	owners := map[types.UID]bool{}
	var lookupErr error
	s.Held = countHeld(list.Items, func(v *kubevirtv1.VirtualMachineInstance) bool {
		ours, err := r.madeByMacvirt(ctx, v, owners)
		if err != nil && lookupErr == nil {
			lookupErr = err
		}
		return ours
	})
	if lookupErr != nil {
		return false, lookupErr
	}
	return true, nil
}

// madeByMacvirt answers whether an instance that holds a licence without
// requesting a slot is a macOS VM of macvirt's: its controller is the
// VirtualMachine of its name, whose controller is a MacMachine (by UID)
// whose VM it is (by the name the machine renders).
// Anyone who may create VMIs can label one as a machine's, and anyone who
// may create VMs can point an owner reference at one of their own, so the
// chain is followed to the machine the operator keeps. owners remembers
// the VMs already answered for within one reconcile.
func (r *Reconciler) madeByMacvirt(ctx context.Context, v *kubevirtv1.VirtualMachineInstance, owners map[types.UID]bool) (bool, error) {
	ref := metav1.GetControllerOf(v)
	if ref == nil || ref.Kind != "VirtualMachine" || ref.Name != v.Name || !sameGroup(ref.APIVersion, kubevirtv1.SchemeGroupVersion.Group) {
		return false, nil
	}
	if ours, ok := owners[ref.UID]; ok {
		return ours, nil
	}
	ours, err := r.machineControls(ctx, types.NamespacedName{Namespace: v.Namespace, Name: ref.Name}, ref.UID)
	if err != nil {
		return false, err
	}
	owners[ref.UID] = ours
	return ours, nil
}

// machineControls answers whether the VM of that name and UID is
// controlled by a MacMachine that exists under the UID the VM names.
func (r *Reconciler) machineControls(ctx context.Context, key types.NamespacedName, uid types.UID) (bool, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.Get(ctx, key, vm); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	ref := metav1.GetControllerOf(vm)
	if vm.UID != uid || ref == nil || ref.Kind != "MacMachine" || !sameGroup(ref.APIVersion, macvirtv1alpha1.GroupVersion.Group) {
		return false, nil
	}
	m := &macvirtv1alpha1.MacMachine{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: ref.Name}, m); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	// The machine's own VM, by its name: anyone who may create VMs can point
	// the owner reference of any number of them at a machine of theirs.
	return m.UID == ref.UID && render.VirtualMachineName(m) == vm.Name, nil
}

// sameGroup reports whether an owner reference's apiVersion is of group.
func sameGroup(apiVersion, group string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == group
}

// decideSlots answers: how many slots should the node advertise? An
// invalid setting, or a count adjusted for the VMs the node runs, is said
// in a Warning event on the node, once per message.
func (r *Reconciler) decideSlots(_ context.Context, s *nodeScope) (bool, error) {
	s.Slots = computeNodeSlots(s.Node, s.Held)
	for _, w := range []struct{ reason, note string }{{"InvalidMacOSSlots", s.Slots.Invalid}, {"MacOSSlotsAdjusted", s.Slots.Adjusted}} {
		key := s.Node.Name + "/" + w.reason
		if w.note == "" {
			r.warned.Forget(key)
			continue
		}
		// The reconciler has no clock of its own: the time recorded is
		// only when the warning was given, and no record expires.
		if last, _, ok := r.warned.Get(key, time.Now()); ok && last == w.note {
			continue
		}
		r.warned.Assume(key, w.note, time.Now(), base.UntilForgotten)
		base.RecordEvent(r.Recorder, s.Node, corev1.EventTypeWarning, w.reason, "AdvertiseSlots", w.note)
	}
	return true, nil
}

// advertiseSlots answers: does the node's status say so? Capacity and
// allocatable are written together in one merge patch (the kubelet keeps
// allocatable equal to capacity for a resource it does not own; writing
// both makes the slots schedulable at once). A refused write is said on
// the node, in the API server's words, and retried.
func (r *Reconciler) advertiseSlots(ctx context.Context, s *nodeScope) (bool, error) {
	if advertised(s.Node, s.Slots.Want) {
		return true, nil
	}
	var value any
	if s.Slots.Want != nil {
		value = s.Slots.Want.String()
	}
	entry := map[string]any{macvirtv1alpha1.ResourceMacOSSlots: value}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": entry, "allocatable": entry}})
	if err != nil {
		return false, err
	}
	if err := r.Status().Patch(ctx, s.Node, client.RawPatch(types.MergePatchType, body)); err != nil {
		err = fmt.Errorf("advertising %s=%v on node %s: %w", macvirtv1alpha1.ResourceMacOSSlots, value, s.Node.Name, err)
		base.RecordEvent(r.Recorder, s.Node, corev1.EventTypeWarning, "SlotsNotAdvertised", "AdvertiseSlots", err.Error())
		return false, err
	}
	ctrl.LoggerFrom(ctx).Info("advertised macOS slots", "node", s.Node.Name, "slots", value)
	return true, nil
}

// slotsRelevant passes the node changes that can change what the node
// should advertise or what it does: labels, annotations, and its status
// resources. Heartbeats and condition updates pass nothing.
func slotsRelevant() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			if o == nil || n == nil {
				return true
			}
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.Annotations, n.Annotations) ||
				!equality.Semantic.DeepEqual(o.Status.Capacity, n.Status.Capacity) ||
				!equality.Semantic.DeepEqual(o.Status.Allocatable, n.Status.Allocatable)
		},
	}
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.ControllerName
	if name == "" {
		name = "nodeslots"
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&corev1.Node{}, builder.WithPredicates(slotsRelevant())).
		// An instance placed, finished or gone changes what its node holds.
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(vmiToNode),
			builder.WithPredicates(placementChanged())).
		Complete(r)
}

// vmiToNode maps an instance to the node it runs on.
func vmiToNode(_ context.Context, o client.Object) []reconcile.Request {
	if node := o.(*kubevirtv1.VirtualMachineInstance).Status.NodeName; node != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
	}
	return nil
}

// placementChanged passes instance events that change what a node holds:
// creation and deletion, a new node, and the end of the instance.
func placementChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*kubevirtv1.VirtualMachineInstance), e.ObjectNew.(*kubevirtv1.VirtualMachineInstance)
			if o == nil || n == nil {
				return true
			}
			return o.Status.NodeName != n.Status.NodeName || o.IsFinal() != n.IsFinal()
		},
	}
}
