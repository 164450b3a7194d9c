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

package simulator_test

import (
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/vmstop"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// vmWithGuest creates a running VirtualMachine whose simulated guest
// heartbeats to ep.
func vmWithGuest(ns, name string, ep *endpoint) {
	srv := httptest.NewTLSServer(ep)
	DeferCleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-agent"}, StringData: map[string]string{
		guestprotocol.KeyEndpoint: srv.URL, guestprotocol.KeyCABundle: string(ca), guestprotocol.KeyToken: "the-token",
		guestprotocol.KeyNamespace: ns, guestprotocol.KeyMachine: name}})
	vm := newVM(ns, name)
	spec := &vm.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{Name: "agent-config", VolumeSource: kubevirtv1.VolumeSource{
		Secret: &kubevirtv1.SecretVolumeSource{SecretName: name + "-agent", VolumeLabel: guestprotocol.ConfigVolumeLabel}}})
	create(vm)
}

var _ = Describe("The guest's power", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("a guest that ignores ACPI heartbeats through the whole grace period, then is killed and its instance ends Failed", func() {
		ep := &endpoint{}
		vmWithGuest(ns, "deaf", ep)
		fault := simulator.Fault{Kind: simulator.IgnoreACPI, Namespace: ns, Name: "deaf"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		Eventually(ep.heartbeats).WithTimeout(timeout).ShouldNot(BeEmpty())
		vmiStates := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return fmt.Sprintf("%s deleting=%t", vmi.Status.Phase, vmi.DeletionTimestamp != nil)
		})
		stopper, err := vmstop.NewRESTStopper(world.Config, nil)
		Expect(err).NotTo(HaveOccurred())

		// Through virt-api's stop subresource, with a grace period longer
		// than the simulated ACPI shutdown: a guest that listened would be
		// off before it ends.
		Expect(stopper.Stop(ctx, ns, "deaf", 3)).To(Succeed())
		stopped := time.Now()
		Eventually(vmiPhase(ns, "deaf")).WithTimeout(timeout).Should(Equal(kubevirtv1.Failed))
		Expect(time.Since(stopped)).To(BeNumerically(">=", 3*time.Second), "killed only once the grace period is over")
		Expect(ep.heartbeats()).To(ContainElement(HaveField("Machine.Name", "deaf")))
		heard := len(ep.heartbeats())
		Expect(heard).To(BeNumerically(">", 2), "the guest kept heartbeating while it ignored the power button")
		Eventually(vmiNotFound(ns, "deaf")).WithTimeout(timeout).Should(BeTrue())
		Eventually(vmiStates.Seen).WithTimeout(timeout).Should(HaveExactElements(
			"Running deleting=false", "Running deleting=true", "Failed deleting=true"))
	})

	It("a guest shut down from inside macOS ends its instance Succeeded, and runStrategy Always starts a new one", func() {
		ep := &endpoint{}
		vmWithGuest(ns, "menu", ep)
		Eventually(vmiPhase(ns, "menu")).WithTimeout(timeout).Should(Equal(kubevirtv1.Running))
		first, err := getVMI(ns, "menu")
		Expect(err).NotTo(HaveOccurred())
		vmiStates := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			if vmi.UID != first.UID {
				return "new " + string(vmi.Status.Phase)
			}
			return fmt.Sprintf("%s deleting=%t", vmi.Status.Phase, vmi.DeletionTimestamp != nil)
		})

		Expect(sim.ShutDownGuest(ctx, types.NamespacedName{Namespace: ns, Name: "menu"})).To(Succeed())
		Eventually(func(g Gomega) {
			vmi, err := getVMI(ns, "menu")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vmi.UID).NotTo(Equal(first.UID))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}).WithTimeout(timeout).Should(Succeed())
		// The recorder follows a watch, which may deliver the new
		// instance's Running after the read above saw it.
		Eventually(vmiStates.Seen).WithTimeout(timeout).Should(ContainElements("Succeeded deleting=false", "Succeeded deleting=true", "new Running"))
		Expect(sim.ShutDownGuest(ctx, types.NamespacedName{Namespace: ns, Name: "absent"})).To(MatchError(ContainSubstring("not running")))
	})

	It("a rebooting guest is silent while its instance stays Running, then heartbeats with a new boot time", func() {
		ep := &endpoint{}
		vmWithGuest(ns, "reboot", ep)
		Eventually(ep.heartbeats).WithTimeout(timeout).ShouldNot(BeEmpty())
		before, err := getVMI(ns, "reboot")
		Expect(err).NotTo(HaveOccurred())
		firstBoot := ep.heartbeats()[0].BootTime

		fault := simulator.Fault{Kind: simulator.GuestReboot, Namespace: ns, Name: "reboot"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		// One heartbeat already in flight may still land; no other does.
		silentFrom := len(ep.heartbeats())
		Consistently(func() int { return len(ep.heartbeats()) }).WithTimeout(3500*time.Millisecond).Should(
			BeNumerically("<=", silentFrom+1), "the guest heartbeats every second while it runs")
		silentFrom = len(ep.heartbeats())
		vmi, err := getVMI(ns, "reboot")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.UID).To(Equal(before.UID))
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))

		sim.Clear(fault)
		Eventually(func() []guestprotocol.Heartbeat { return ep.heartbeats()[silentFrom:] }).WithTimeout(timeout).Should(
			ContainElement(HaveField("BootTime", BeTemporally(">", firstBoot))))
	})
})
