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
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// unschedulableMessage is the scheduler's message for a launcher pod no node
// accepts.
const unschedulableMessage = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. " +
	"preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."

// vmiFaults are the faults that affect an instance.
type vmiFaults struct {
	unschedulable bool
	crash         bool
	// The launch faults (faults_launch.go).
	imagePull, paused, migrating, nodeLost bool
}

// stepVMI moves the instance one phase on, as virt-controller and
// virt-handler would, and reports whether anything changed. Timing is the
// caller's business.
func stepVMI(vmi *kubevirtv1.VirtualMachineInstance, f vmiFaults, where placement, now time.Time) bool {
	switch vmi.Status.Phase {
	case kubevirtv1.VmPhaseUnset:
		controllerutil.AddFinalizer(vmi, kubevirtv1.VirtualMachineInstanceFinalizer)
		setVMIPhase(vmi, kubevirtv1.Pending, now)
	case kubevirtv1.Pending:
		setVMIPhase(vmi, kubevirtv1.Scheduling, now)
	case kubevirtv1.Scheduling:
		if f.unschedulable {
			return setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
				Type:   kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: unschedulableMessage,
				LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
			})
		}
		if f.imagePull {
			return stepImagePull(vmi, now)
		}
		clearImagePull(vmi)
		if where.Node == "" {
			// virt-controller copies the pod's condition once and keeps it
			// while the pod stays unscheduled (AddPodCondition in
			// pkg/controller/conditions.go), so a later message does not
			// replace the first.
			if vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)) != nil {
				return false
			}
			return setVMICondition(vmi, kubevirtv1.VirtualMachineInstanceCondition{
				Type:   kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: where.Message,
				LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
			})
		}
		removeVMICondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		node := where.Node
		vmi.Status.NodeName = node
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[kubevirtv1.NodeNameLabel] = node
		setVMIPhase(vmi, kubevirtv1.Scheduled, now)
	case kubevirtv1.Scheduled:
		if f.crash {
			setVMIPhase(vmi, kubevirtv1.Failed, now)
			break
		}
		vmi.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{podInterface(vmi)}
		setVMIPhase(vmi, kubevirtv1.Running, now)
	case kubevirtv1.Running:
		if !f.crash {
			return stepRunning(vmi, f, now)
		}
		setVMIPhase(vmi, kubevirtv1.Failed, now)
	default:
		return false
	}
	return true
}

// setVMIPhase enters phase, records the transition and sets the Ready
// condition virt-controller derives from the launcher pod in that phase.
func setVMIPhase(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time) {
	enterPhase(vmi, phase, now)
	t := metav1.NewTime(now)
	ready := kubevirtv1.VirtualMachineInstanceCondition{
		Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse,
		LastProbeTime: t, LastTransitionTime: t,
	}
	switch phase {
	case kubevirtv1.Pending:
		ready.Reason, ready.Message = kubevirtv1.PodNotExistsReason, "virt-launcher pod has not yet been scheduled"
	case kubevirtv1.Running:
		ready.Status = corev1.ConditionTrue
	case kubevirtv1.Failed, kubevirtv1.Succeeded:
		ready.Reason, ready.Message = kubevirtv1.PodTerminatingReason, "virt-launcher pod is terminating"
	default:
		ready.Reason, ready.Message = kubevirtv1.GuestNotRunningReason, "Guest VM is not reported as running"
	}
	setVMICondition(vmi, ready)
}

// enterPhase enters phase and records the transition, as virt-handler
// does for the phases it reports (Running, Succeeded, Failed).
func enterPhase(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time) {
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}

// podInterface is the instance's interface on the pod network as
// virt-handler reports it (pkg/network/setup/netstat.go, UpdateStatus): the
// interface from the domain, its IP the virt-launcher pod's IP from the pod
// interface cache (updateIfacesStatusFromPodCache), whatever the binding.
// Only a QEMU guest agent would add the guest's own view (interfaceName,
// infoSource "guest-agent"), and macOS runs none. The pod IP is derived
// from the instance's name so that it is stable across restarts.
func podInterface(vmi *kubevirtv1.VirtualMachineInstance) kubevirtv1.VirtualMachineInstanceNetworkInterface {
	name := "default"
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil {
			name = n.Name
			break
		}
	}
	h := hash(vmi.Namespace + "/" + vmi.Name)
	mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[1], h[2], h[3])
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Name == name && iface.MacAddress != "" {
			mac = iface.MacAddress
		}
	}
	ip := IPAddressFor(vmi.Namespace, vmi.Name)
	return kubevirtv1.VirtualMachineInstanceNetworkInterface{
		Name: name, IP: ip, IPs: []string{ip}, MAC: mac,
		PodInterfaceName: "eth0", InfoSource: "domain",
		QueueCount: 1, LinkState: "up",
	}
}

// IPAddressFor returns the pod-network address the simulator reports for the
// running VirtualMachine namespace/name: 10.244.x.y, the same on every start.
func IPAddressFor(namespace, name string) string {
	h := hash(namespace + "/" + name)
	return fmt.Sprintf("10.244.%d.%d", h[2], 2+int(h[3])%253)
}

// hash is the 4-byte FNV-1a hash of s.
func hash(s string) []byte {
	f := fnv.New32a()
	_, _ = f.Write([]byte(s))
	return f.Sum(nil)
}
