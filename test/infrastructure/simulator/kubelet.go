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
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// With KubeVirt's own control plane (Options.ControlPlane) virt-controller
// creates each instance's virt-launcher pod, and the simulator plays what
// happens to that pod on a node: kube-scheduler binds it, the kubelet runs
// its containers and reports them, and ends them when the domain is off or
// the pod's grace period runs out.

// launcherStartSteps is the number of node-side steps from a pod's creation
// to a Running instance (the pod is bound, its containers run, the domain
// starts); StartDelay is spread over them.
const launcherStartSteps = 3

// launcherReconciler plays kube-scheduler and the kubelet for virt-launcher
// pods.
type launcherReconciler struct {
	sim *Simulator
}

// launcherLabels select the virt-launcher pods virt-controller creates.
var launcherLabels = client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"}

// launcherPods lets only virt-launcher pods through to the node side.
var launcherPods = predicate.NewPredicateFuncs(func(o client.Object) bool {
	return o.GetLabels()[kubevirtv1.AppLabel] == launcherLabels[kubevirtv1.AppLabel]
})

func (r *launcherReconciler) setup(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sim-kubelet").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		For(&corev1.Pod{}, builder.WithPredicates(launcherPods)).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(r.podsOf)).
		WatchesRawSource(source.Channel(r.sim.podEvents, handler.EnqueueRequestsFromMapFunc(r.podsOf))).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the kubelet simulator: %w", err)
	}
	return nil
}

// podsOf maps an instance (or a fault's prompt naming one) to its
// virt-launcher pods.
func (r *launcherReconciler) podsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := r.sim.client.List(ctx, pods, client.InNamespace(obj.GetNamespace()), launcherLabels); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.Name == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
		}
	}
	return out
}

// Reconcile moves one launcher pod by at most one step.
func (r *launcherReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := pacerKey("Pod", req.NamespacedName)
	pod := &corev1.Pod{}
	if err := r.sim.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.sim.pacer.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting pod %s: %w", req.NamespacedName, err)
	}
	vmi, err := r.sim.instanceOf(ctx, pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := time.Now()
	var f vmiFaults
	if ref := metav1.GetControllerOf(pod); ref != nil {
		f = r.sim.faultsOf(types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name})
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return r.terminate(ctx, key, pod, vmi)
	case pod.Spec.NodeName == "":
		return r.bind(ctx, key, pod, f)
	case podDone(pod):
		return ctrl.Result{}, nil
	case vmi == nil || vmi.IsFinal():
		// virt-launcher exits once its domain is gone.
		return ctrl.Result{}, r.writeStatus(ctx, pod, exitedStatus(pod, vmi, now))
	case pod.Status.Phase != corev1.PodRunning:
		step := r.sim.opts.StartDelay / launcherStartSteps
		if wait := r.sim.pacer.wait(key, pod.UID, pullState(pod), step); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		if f.imagePull {
			return ctrl.Result{RequeueAfter: step}, r.writeStatus(ctx, pod, failedPullStatus(pod))
		}
	}
	ip, err := r.sim.podIPFor(ctx, pod)
	if err != nil {
		return ctrl.Result{}, err
	}
	want := runningStatus(pod, ip, now)
	if podStatusEqual(pod.Status, want) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.writeStatus(ctx, pod, want)
}

// bind places an unbound pod on a node as kube-scheduler does: through the
// binding subresource, which also records PodScheduled. A pod no node takes
// keeps the scheduler's answer in its PodScheduled condition and is tried
// again after StartDelay, as the scheduler retries when nodes or pods change.
func (r *launcherReconciler) bind(ctx context.Context, key string, pod *corev1.Pod, f vmiFaults) (ctrl.Result, error) {
	if wait := r.sim.pacer.wait(key, pod.UID, "Pending", r.sim.opts.StartDelay/launcherStartSteps); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	where := placement{Message: unschedulableMessage}
	if !f.unschedulable {
		var err error
		if where, err = r.sim.placePod(ctx, pod); err != nil {
			return ctrl.Result{}, err
		}
	}
	if where.Node == "" {
		status := pod.Status.DeepCopy()
		setPodCondition(status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: where.Message})
		return ctrl.Result{RequeueAfter: r.sim.opts.StartDelay}, r.writeStatus(ctx, pod, *status)
	}
	if bound, err := r.sim.bindVolumes(ctx, pod, where.Node); err != nil || !bound {
		r.sim.assume(pod.UID, where.Node)
		return ctrl.Result{RequeueAfter: r.sim.opts.StartDelay / launcherStartSteps}, err
	}
	defer r.sim.assume(pod.UID, "")
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: where.Node},
	}
	if err := r.sim.client.SubResource("binding").Create(ctx, pod, binding); err != nil {
		if apierrors.IsConflict(err) {
			// Bound already: the cache had not seen it yet.
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, where.Node, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Pod bound", "node", where.Node)
	return ctrl.Result{}, nil
}

// podIPFor is the address the pod keeps once it has one; a new pod gets
// PodIPFor's, or, when a running pod holds that already, the next free one
// after it, as IPAM never hands out an address in use.
func (s *Simulator) podIPFor(ctx context.Context, pod *corev1.Pod) (string, error) {
	if pod.Status.PodIP != "" {
		return pod.Status.PodIP, nil
	}
	pods := &corev1.PodList{}
	if err := s.reader.List(ctx, pods); err != nil {
		return "", fmt.Errorf("listing pods: %w", err)
	}
	held := map[string]bool{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.UID != pod.UID && p.Status.PodIP != "" && !podDone(p) {
			held[p.Status.PodIP] = true
		}
	}
	ip := PodIPFor(pod.Namespace, pod.Name)
	for try := 1; held[ip]; try++ {
		ip = PodIPFor(pod.Namespace, fmt.Sprintf("%s#%d", pod.Name, try))
	}
	return ip, nil
}

// bindVolumes plays kube-scheduler's volume binding for a pod going to
// node: a claim of the pod's that is not bound yet and whose class binds
// on first consumer is given the node (volume.kubernetes.io/selected-node,
// which lets CDI and the provisioner go on), and the pod is bound only once
// every claim it uses is (the VolumeBinding plugin's PreBind waits for
// them). It reports whether the pod may be bound now.
func (s *Simulator) bindVolumes(ctx context.Context, pod *corev1.Pod, node string) (bool, error) {
	ready := true
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := s.reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			continue
		}
		ready = false
		if pvc.Annotations[annSelectedNode] != "" || pvc.Spec.StorageClassName == nil {
			// Selected already; or of no class, which the stand-in for a
			// default provisioner binds at once (provisionerFor).
			continue
		}
		sc, err := s.storageClassNamed(ctx, pvc.Spec.StorageClassName, false)
		if err != nil {
			return false, err
		}
		if sc == nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, annSelectedNode, node)
		if err := s.client.Patch(ctx, pvc, patch); err != nil {
			return false, fmt.Errorf("selecting node %s for PVC %s/%s: %w", node, pvc.Namespace, pvc.Name, err)
		}
	}
	return ready, nil
}

// terminate plays the kubelet ending a deleted pod: virt-launcher shuts the
// domain down within the pod's grace period (the instance's own, plus
// KubeVirt's margin), so the containers end once the instance is off, or
// when the grace period runs out; then the kubelet's final delete removes
// the pod. An unbound pod never reaches here: the API server deletes it at
// once.
func (r *launcherReconciler) terminate(ctx context.Context, key string, pod *corev1.Pod, vmi *kubevirtv1.VirtualMachineInstance) (ctrl.Result, error) {
	if !podDone(pod) {
		if vmi != nil && !vmi.IsFinal() {
			grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
			if wait := r.sim.pacer.wait(key, pod.UID, "Terminating", grace); wait > 0 {
				return ctrl.Result{RequeueAfter: wait}, nil
			}
		}
		if err := r.writeStatus(ctx, pod, exitedStatus(pod, vmi, time.Now())); err != nil {
			return ctrl.Result{}, err
		}
	}
	err := r.sim.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.sim.pacer.forget(key)
	return ctrl.Result{}, nil
}

func (r *launcherReconciler) writeStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	pod = pod.DeepCopy()
	pod.Status = status
	if err := r.sim.client.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("updating the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// instanceOf returns the instance that controls a launcher pod, or nil.
func (s *Simulator) instanceOf(ctx context.Context, pod *corev1.Pod) (*kubevirtv1.VirtualMachineInstance, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "VirtualMachineInstance" {
		return nil, nil
	}
	vmi, err := s.getVMI(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name})
	if err != nil || vmi == nil || vmi.UID != ref.UID {
		return nil, err
	}
	return vmi, nil
}

// placePod runs the scheduler stand-in for an unbound pod.
func (s *Simulator) placePod(ctx context.Context, pod *corev1.Pod) (placement, error) {
	w := podWorkload(pod)
	var err error
	if w.VolumeNode, err = s.volumeNode(ctx, pod); err != nil {
		return placement{}, err
	}
	return s.placeWorkload(ctx, w, func() ([]workload, error) {
		pods := &corev1.PodList{}
		if err := s.reader.List(ctx, pods); err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		placed := make([]workload, 0, len(pods.Items))
		for i := range pods.Items {
			p := podWorkload(&pods.Items[i])
			if p.Node == "" {
				// A pod waiting for its volumes holds its node, as
				// kube-scheduler's assumed pods do.
				p.Node = s.assumedNode(p.UID)
			}
			placed = append(placed, p)
		}
		return placed, nil
	})
}

// volumeNode is the node selected for the pod's volumes, or "".
func (s *Simulator) volumeNode(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := s.reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		if err != nil {
			if client.IgnoreNotFound(err) != nil {
				return "", err
			}
			continue
		}
		if n := pvc.Annotations[annSelectedNode]; n != "" {
			return n, nil
		}
	}
	return "", nil
}

// assume records that the pod, placed on node, waits there for its
// volumes; "" forgets it.
func (s *Simulator) assume(uid types.UID, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node == "" {
		delete(s.assumed, uid)
		return
	}
	if s.assumed == nil {
		s.assumed = map[types.UID]string{}
	}
	s.assumed[uid] = node
}

func (s *Simulator) assumedNode(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.assumed[uid]
}

func podDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// pulledContainer is the container whose image a failing pull names: the
// first hook sidecar, else compute.
func pulledContainer(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if strings.HasPrefix(pod.Spec.Containers[i].Name, "hook-sidecar-") {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "compute" {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

// pullState is the state the pacer times a starting pod in: a failing
// pull's stage, so that ErrImagePull lasts a step before ImagePullBackOff.
func pullState(pod *corev1.Pod) string {
	c := pulledContainer(pod)
	for _, st := range pod.Status.ContainerStatuses {
		if c != nil && st.Name == c.Name && st.State.Waiting != nil {
			return "Starting/" + st.State.Waiting.Reason
		}
	}
	return "Starting"
}

// failedPullStatus is the kubelet's status of a pod whose image it cannot
// pull (pkg/kubelet/images): the container waits with ErrImagePull and the
// registry's answer, then with ImagePullBackOff; the pod stays Pending.
func failedPullStatus(pod *corev1.Pod) corev1.PodStatus {
	status := pod.Status.DeepCopy()
	c := pulledContainer(pod)
	if c == nil {
		return *status
	}
	waiting := &corev1.ContainerStateWaiting{Reason: reasonErrImagePull,
		Message: fmt.Sprintf("rpc error: code = NotFound desc = failed to pull and unpack image %q: "+
			"failed to resolve reference %q: %s: not found", c.Image, c.Image, c.Image)}
	if pullState(pod) != "Starting" {
		waiting = &corev1.ContainerStateWaiting{Reason: reasonImagePullBackOff, Message: fmt.Sprintf("Back-off pulling image %q", c.Image)}
	}
	status.ContainerStatuses = containerStatuses(pod.Spec.Containers, status.ContainerStatuses, func(st *corev1.ContainerStatus) {
		if st.Name == c.Name {
			st.State = corev1.ContainerState{Waiting: waiting}
		}
	})
	return *status
}

// runningStatus is the status the kubelet reports for a started launcher
// pod: init containers completed, every container running and ready (macvirt
// sets no readiness probe), the pod's address, and Ready only while every
// readiness gate holds (virt-controller keeps kubevirt.io/virtual-machine-
// unpaused). Conditions the kubelet does not own are kept.
func runningStatus(pod *corev1.Pod, ip string, now time.Time) corev1.PodStatus {
	status := pod.Status.DeepCopy()
	started := metav1.NewTime(now)
	if status.StartTime != nil {
		started = *status.StartTime
	}
	status.Phase = corev1.PodRunning
	status.StartTime = &started
	status.HostIP, status.HostIPs = NodeAddress, []corev1.HostIP{{IP: NodeAddress}}
	status.PodIP, status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	status.InitContainerStatuses = containerStatuses(pod.Spec.InitContainers, status.InitContainerStatuses, func(c *corev1.ContainerStatus) {
		if c.State.Terminated == nil {
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: started, FinishedAt: started}}
		}
		c.Ready = true
	})
	status.ContainerStatuses = containerStatuses(pod.Spec.Containers, status.ContainerStatuses, func(c *corev1.ContainerStatus) {
		if c.State.Running == nil {
			c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
		}
		c.Ready, c.Started = true, ptr.To(true)
	})
	gates := corev1.ConditionTrue
	for _, g := range pod.Spec.ReadinessGates {
		if c := podCondition(status, g.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
			gates = corev1.ConditionFalse
		}
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady} {
		setPodCondition(status, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue})
	}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: gates}
	if gates != corev1.ConditionTrue {
		ready.Reason = "ReadinessGatesNotReady"
	}
	setPodCondition(status, ready)
	return *status
}

// exitedStatus is the status of a launcher pod whose virt-launcher ended:
// Succeeded after a clean shutdown, Failed when the domain was killed or
// failed.
func exitedStatus(pod *corev1.Pod, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) corev1.PodStatus {
	status := pod.Status.DeepCopy()
	phase, code, reason := corev1.PodFailed, int32(1), "Error"
	if vmi != nil && vmi.Status.Phase == kubevirtv1.Succeeded {
		phase, code, reason = corev1.PodSucceeded, 0, "Completed"
	}
	status.Phase = phase
	finished := metav1.NewTime(now)
	status.ContainerStatuses = containerStatuses(pod.Spec.Containers, status.ContainerStatuses, func(c *corev1.ContainerStatus) {
		if c.State.Terminated == nil {
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, FinishedAt: finished}}
		}
		c.Ready, c.Started = false, ptr.To(false)
	})
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(status, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: "PodCompleted"})
	}
	return *status
}

// containerStatuses is one status per container of spec, the previous one
// kept where there was one, each then set by set.
func containerStatuses(spec []corev1.Container, prev []corev1.ContainerStatus, set func(*corev1.ContainerStatus)) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(spec))
	for _, c := range spec {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image}
		for _, p := range prev {
			if p.Name == c.Name {
				st = *p.DeepCopy()
			}
		}
		set(&st)
		out = append(out, st)
	}
	return out
}

func podCondition(status *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

// setPodCondition sets a condition, its transition time moving only when its
// status changes.
func setPodCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.Now()
	if old := podCondition(status, c.Type); old != nil {
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status {
			c.LastTransitionTime = now
		}
		c.LastProbeTime = old.LastProbeTime
		*old = c
		return
	}
	c.LastTransitionTime = now
	status.Conditions = append(status.Conditions, c)
}

// podStatusEqual compares two statuses, ignoring condition times.
func podStatusEqual(a, b corev1.PodStatus) bool {
	strip := func(s corev1.PodStatus) corev1.PodStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime, s.Conditions[i].LastProbeTime = metav1.Time{}, metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}
