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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// hookImage is the sidecar image the launch specs' VirtualMachines name.
const hookImage = "ghcr.io/macvirt/macvirt-domain-hook:missing"

// withHookSidecar adds a hook sidecar to the VirtualMachine's template.
func withHookSidecar(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachine {
	vm.Spec.Template.ObjectMeta.Annotations["hooks.kubevirt.io/hookSidecars"] = `[{"args":["--version","v1alpha3"],"image":"` + hookImage + `"}]`
	return vm
}

// vmiConditionOf matches an instance condition by type, status and reason.
func vmiConditionOf(t string, status corev1.ConditionStatus, reason string) OmegaMatcher {
	return ContainElement(MatchFields(IgnoreExtras, Fields{
		"Type": BeEquivalentTo(t), "Status": Equal(status), "Reason": Equal(reason),
	}))
}

var _ = Describe("VirtualMachine launch", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("creates the instance at once and holds it Pending while a standalone DataVolume imports", func() {
		// The import waits for its importer pod until the instance was
		// seen Pending: at the suite's pace it would end in 200 ms, before
		// a busy machine's first look.
		held := simulator.Fault{Kind: simulator.ImporterUnschedulable, Namespace: ns, Name: "disk"}
		sim.Inject(held)
		create(newDataVolume(ns, "disk"))
		// CDI makes the PVC at once; a VM that came first would find none
		// and keep virt-controller's PodScheduled=False "PVC ... does not
		// exist" (ErrorUnschedulable) until its pod is made.
		Eventually(claimPhase(ns, "disk")).WithTimeout(timeout).ShouldNot(BeEmpty())
		create(newVM(ns, "mac", "disk"))

		Eventually(func(g Gomega) {
			vmi, err := getVMI(ns, "mac")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Pending))
			g.Expect(vmi.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":   Equal(kubevirtv1.VirtualMachineInstanceDataVolumesReady),
				"Status": Not(Equal(corev1.ConditionTrue)),
				"Reason": Equal(kubevirtv1.VirtualMachineInstanceReasonNotAllDVsReady),
			})))
			dv, err := getDataVolume(ns, "disk")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(dv.Status.Phase).NotTo(Equal(cdiv1.Succeeded))
		}).WithTimeout(timeout).Should(Succeed())
		// virt-controller writes the VirtualMachine's status from the
		// instance it saw: it follows.
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusProvisioning))
		sim.Clear(held)

		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vmi, err := getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Conditions).To(vmiConditionOf("DataVolumesReady", corev1.ConditionTrue, kubevirtv1.VirtualMachineInstanceReasonAllDVsReady))
	})

	It("keeps the instance Scheduling with ErrImagePull, then ImagePullBackOff, while the sidecar image cannot be pulled", func() {
		fault := simulator.Fault{Kind: simulator.ImagePullFailed, Namespace: ns, Name: "mac"}
		sim.Inject(fault)
		importedDataVolume(ns, "disk")
		seen := record(&kubevirtv1.VirtualMachineList{}, ns, describeVM)
		create(withHookSidecar(newVM(ns, "mac", "disk")))

		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusImagePullBackOff))
		Expect(seen.Reported()).To(ContainElement(string(kubevirtv1.VirtualMachineStatusErrImagePull)))
		vmi, err := getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling))
		Expect(vmi.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type": Equal(kubevirtv1.VirtualMachineInstanceSynchronized), "Status": Equal(corev1.ConditionFalse),
			"Reason": Equal("ImagePullBackOff"), "Message": ContainSubstring(hookImage),
		})))
		vm, err := getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.Conditions).To(vmCondition("Synchronized", corev1.ConditionFalse, "ImagePullBackOff"))

		sim.Clear(fault)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vmi, err = getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Conditions).NotTo(vmiConditionOf("Synchronized", corev1.ConditionFalse, "ImagePullBackOff"))
	})

	It("reports Paused and Migrating on a running VirtualMachine, and Running again after", func() {
		importedDataVolume(ns, "disk")
		create(newVM(ns, "mac", "disk"))
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))

		paused := simulator.Fault{Kind: simulator.Paused, Namespace: ns, Name: "mac"}
		sim.Inject(paused)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusPaused))
		vm, err := getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.Conditions).To(vmCondition("Paused", corev1.ConditionTrue, "PausedByUser"))
		sim.Clear(paused)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))

		migrating := simulator.Fault{Kind: simulator.Migrating, Namespace: ns, Name: "mac"}
		sim.Inject(migrating)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusMigrating))
		Expect(vmiPhase(ns, "mac")(Default)).To(Equal(kubevirtv1.Running))
		sim.Clear(migrating)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vmi, err := getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.MigrationState).NotTo(BeNil())
		Expect(vmi.Status.MigrationState.Completed).To(BeTrue())
	})

	It("fails the instance of a lost node and restarts it under runStrategy Always, with no start failure", func() {
		importedDataVolume(ns, "disk")
		create(newVM(ns, "sonoma", "disk"))
		Eventually(vmiPhase(ns, "sonoma")).WithTimeout(timeout).Should(Equal(kubevirtv1.Running))
		first, err := getVMI(ns, "sonoma")
		Expect(err).NotTo(HaveOccurred())
		failed := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return string(vmi.Status.Phase) + " " + vmi.Status.Reason
		})

		sim.Inject(simulator.Fault{Kind: simulator.NodeLost, Namespace: ns, Name: "sonoma"})
		Eventually(failed.Seen).WithTimeout(timeout).Should(ContainElement("Failed NodeUnresponsive"))
		Eventually(func(g Gomega) {
			vmi, err := getVMI(ns, "sonoma")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vmi.UID).NotTo(Equal(first.UID))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}).WithTimeout(timeout).Should(Succeed())
		vm, err := getVM(ns, "sonoma")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.StartFailure).To(BeNil())
	})
})
