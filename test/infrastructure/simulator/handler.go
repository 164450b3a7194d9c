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
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// KubeVirt's identity on a node. virt-api accepts an instance's status only
// from KubeVirt's service accounts (its VMI mutator puts any other writer's
// status back), and with the NodeRestriction gate (on by default) only from
// the handler of the node the instance runs on, named in the request's
// extra user info (pkg/virt-api/webhooks/validating-webhook/admitters/
// vmi-update-admitter.go).
const (
	handlerUser   = "system:serviceaccount:kubevirt:kubevirt-handler"
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// handlerReconciler plays virt-handler on the simulated nodes: it starts the
// domain of an instance virt-controller has Scheduled onto one of them,
// applies the guest-side faults of a Running one, and shuts down the domain
// of a deleted instance, or one whose pod is going. Every write goes as the
// node's virt-handler.
type handlerReconciler struct {
	sim *Simulator
}

func (r *handlerReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-virt-handler").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&kubevirtv1.VirtualMachineInstance{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(instanceOfPod), builder.WithPredicates(launcherPods)).
		WatchesRawSource(source.Channel(r.sim.vmiEvents, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the virt-handler simulator: %w", err)
	}
	return nil
}

// instanceOfPod maps a launcher pod to the instance that controls it.
func instanceOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "VirtualMachineInstance" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}}}
}

// Reconcile moves one instance on its node by at most one step.
func (r *handlerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := pacerKey("VirtualMachineInstance", req.NamespacedName)
	vmi, err := r.sim.getVMI(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.sim.syncGuest(req.NamespacedName, vmi)
	f := r.sim.faultsOf(req.NamespacedName)
	if vmi != nil && f.nodeLost && vmi.IsFinal() {
		// virt-controller has failed the instance: the node comes back, or,
		// registered only to be lost, goes.
		if err := r.sim.nodeBack(ctx, vmi.Status.NodeName); err != nil {
			return ctrl.Result{}, err
		}
		r.sim.Clear(Fault{Kind: NodeLost, Namespace: vmi.Namespace, Name: vmi.Name})
	}
	if vmi == nil || vmi.IsFinal() {
		r.sim.pacer.forget(key)
		return ctrl.Result{}, nil
	}
	if vmi.Status.NodeName == "" {
		return ctrl.Result{}, nil
	}
	going, err := r.podGoing(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := time.Now()
	switch {
	case vmi.DeletionTimestamp != nil || going:
		delay, off := r.sim.powerOff(vmi)
		if wait := r.sim.pacer.wait(key, vmi.UID, "ShuttingDown", delay); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		enterPhase(vmi, off, now)
	case vmi.Status.Phase == kubevirtv1.Scheduled:
		if wait := r.sim.pacer.wait(key, vmi.UID, "Starting", r.sim.opts.StartDelay/launcherStartSteps); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if f.crash {
			enterPhase(vmi, kubevirtv1.Failed, now)
			break
		}
		ip, err := r.podIP(ctx, vmi)
		if err != nil || ip == "" {
			// virt-handler reports the domain once its pod runs.
			return ctrl.Result{RequeueAfter: r.sim.opts.StartDelay / launcherStartSteps}, err
		}
		setPodInterface(vmi, ip)
		enterPhase(vmi, kubevirtv1.Running, now)
	case vmi.Status.Phase == kubevirtv1.Running && f.nodeLost:
		return ctrl.Result{RequeueAfter: r.sim.opts.StartDelay}, r.loseNode(ctx, vmi)
	case vmi.Status.Phase == kubevirtv1.Running:
		if f.crash {
			enterPhase(vmi, kubevirtv1.Failed, now)
			break
		}
		if !stepRunning(vmi, f, now) {
			return ctrl.Result{}, nil
		}
	default:
		return ctrl.Result{}, nil
	}
	if err := r.write(ctx, vmi); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).V(1).Info("VirtualMachineInstance reported by virt-handler", "phase", vmi.Status.Phase)
	return ctrl.Result{}, nil
}

// loseNode plays the loss of the instance's node: its launcher pod is gone
// (the kubelet reports its containers ended) and virt-handler's heartbeat
// stops, which virt-controller's node controller notices
// (pkg/virt-controller/watch/node/node.go): it fails the instance with
// reason NodeUnresponsive.
func (r *handlerReconciler) loseNode(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	pods, err := r.sim.podsOfInstance(ctx, vmi)
	if err != nil {
		return err
	}
	for i := range pods {
		pod := &pods[i]
		if podDone(pod) {
			continue
		}
		pod.Status = exitedStatus(pod, vmi, time.Now())
		if err := r.sim.client.Status().Update(ctx, pod); err != nil {
			return fmt.Errorf("failing the pod %s/%s of a lost node: %w", pod.Namespace, pod.Name, err)
		}
	}
	return r.sim.silenceNode(ctx, vmi.Status.NodeName)
}

// silenceNode stops the node's heartbeat once: virt-controller checks a
// node when its Node changes, so one, with its virt-handler pod, is
// registered with a stale heartbeat if none stood for it yet; a node whose
// heartbeat is already stale is left alone.
func (s *Simulator) silenceNode(ctx context.Context, name string) error {
	stale := time.Now().Add(-staleHeartbeat)
	node := &corev1.Node{}
	err := s.reader.Get(ctx, types.NamespacedName{Name: name}, node)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.registerNode(ctx, name, false, stale); err != nil {
			return fmt.Errorf("registering the lost node %s: %w", name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the lost node %s: %w", name, err)
	}
	if beat, err := time.Parse(time.RFC3339, node.Annotations[kubevirtv1.VirtHandlerHeartbeat]); err == nil && !beat.After(stale.Add(time.Minute)) {
		return nil
	}
	return s.writeHeartbeat(ctx, name, stale)
}

// podGoing reports whether the instance's launcher pod is being deleted
// (evicted, or its node drained): virt-launcher then shuts the domain down.
func (r *handlerReconciler) podGoing(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	pods, err := r.sim.podsOfInstance(ctx, vmi)
	if err != nil {
		return false, err
	}
	for i := range pods {
		if p := &pods[i]; p.Spec.NodeName == vmi.Status.NodeName && p.DeletionTimestamp != nil {
			return true, nil
		}
	}
	return false, nil
}

// podIP is the address of the instance's running launcher pod on its
// node, or "" while there is none.
func (r *handlerReconciler) podIP(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (string, error) {
	pods, err := r.sim.podsOfInstance(ctx, vmi)
	if err != nil {
		return "", err
	}
	for i := range pods {
		if p := &pods[i]; p.Spec.NodeName == vmi.Status.NodeName && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p.Status.PodIP, nil
		}
	}
	return "", nil
}

// podsOfInstance lists the launcher pods virt-controller created for the
// instance.
func (s *Simulator) podsOfInstance(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := s.client.List(ctx, pods, client.InNamespace(vmi.Namespace),
		client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, fmt.Errorf("listing the pods of VirtualMachineInstance %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return pods.Items, nil
}

// write updates the instance as its node's virt-handler (the instance CRD
// has no status subresource: one update writes all).
func (r *handlerReconciler) write(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	c, err := r.sim.handlerClient(vmi.Status.NodeName)
	if err != nil {
		return err
	}
	if err := c.Update(ctx, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating VirtualMachineInstance %s/%s as virt-handler: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// handlerClient is a client that speaks as the virt-handler of node.
func (s *Simulator) handlerClient(node string) (client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.handlers[node]; ok {
		return c, nil
	}
	cfg := rest.CopyConfig(s.opts.ControlPlane)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: handlerUser, Extra: map[string][]string{nodeNameExtra: {node}}}
	c, err := client.New(cfg, client.Options{Scheme: s.client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("a client for the virt-handler of node %s: %w", node, err)
	}
	if s.handlers == nil {
		s.handlers = map[string]client.Client{}
	}
	s.handlers[node] = c
	return c, nil
}

// setPodInterface reports the instance's pod-network interface as
// virt-handler does, into the entry virt-controller made for it (which
// holds podInterfaceName).
func setPodInterface(vmi *kubevirtv1.VirtualMachineInstance, podIP string) {
	iface := podInterface(vmi, podIP)
	for i := range vmi.Status.Interfaces {
		if vmi.Status.Interfaces[i].Name == iface.Name {
			if name := vmi.Status.Interfaces[i].PodInterfaceName; name != "" {
				iface.PodInterfaceName = name
			}
			vmi.Status.Interfaces[i] = iface
			return
		}
	}
	vmi.Status.Interfaces = append(vmi.Status.Interfaces, iface)
}

// shutdownDelay is ShutdownDelay, cut short by a smaller termination grace
// period, after which virt-handler would kill the guest.
func (s *Simulator) shutdownDelay(vmi *kubevirtv1.VirtualMachineInstance) time.Duration {
	d := s.opts.ShutdownDelay
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		d = min(d, time.Duration(*g)*time.Second)
	}
	return d
}

// getVMI returns the named instance, or nil when there is none.
func (s *Simulator) getVMI(ctx context.Context, name types.NamespacedName) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, name, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting VirtualMachineInstance %s: %w", name, err)
	}
	return vmi, nil
}
