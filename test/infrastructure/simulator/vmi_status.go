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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
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

// enterPhase enters phase and records the transition, as virt-handler
// does for the phases it reports (Running, Succeeded, Failed).
func enterPhase(vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time) {
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now)})
}

// podInterface is the instance's interface on the pod network as
// virt-handler reports it (pkg/network/setup/netstat.go, UpdateStatus): the
// interface from the domain, its IP the virt-launcher pod's IP (podIP)
// from the pod interface cache (updateIfacesStatusFromPodCache), whatever
// the binding. Only a QEMU guest agent would add the guest's own view
// (interfaceName, infoSource "guest-agent"), and macOS runs none.
func podInterface(vmi *kubevirtv1.VirtualMachineInstance, podIP string) kubevirtv1.VirtualMachineInstanceNetworkInterface {
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
	return kubevirtv1.VirtualMachineInstanceNetworkInterface{
		Name: name, IP: podIP, IPs: []string{podIP}, MAC: mac,
		PodInterfaceName: "eth0", InfoSource: "domain",
		QueueCount: 1, LinkState: "up",
	}
}

// PodIPFor returns the pod-network address the simulated kubelet gives the
// pod namespace/name, 10.244.x.y, unless a running pod holds it already
// (then the next free one: podIPFor). Every pod has a name of its own (a
// virt-launcher pod's ends in a random suffix), so every new launcher pod
// of a VirtualMachine gets a new address, as a network plugin's IPAM
// hands them out.
func PodIPFor(namespace, name string) string {
	h := hash(namespace + "/" + name)
	return fmt.Sprintf("10.244.%d.%d", h[2], 2+int(h[3])%253)
}

// hash is the 4-byte FNV-1a hash of s.
func hash(s string) []byte {
	f := fnv.New32a()
	_, _ = f.Write([]byte(s))
	return f.Sum(nil)
}
