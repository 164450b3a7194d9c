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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// vmCondition matches a VirtualMachine condition by status and reason.
func vmCondition(t string, status corev1.ConditionStatus, reason string) OmegaMatcher {
	return ContainElement(MatchFields(IgnoreExtras, Fields{
		"Type":   BeEquivalentTo(t),
		"Status": Equal(status),
		"Reason": Equal(reason),
	}))
}

// vmiNotFound polls until the instance is gone.
func vmiNotFound(ns, name string) func() bool {
	return func() bool {
		_, err := getVMI(ns, name)
		return apierrors.IsNotFound(err)
	}
}

var _ = Describe("VirtualMachine", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("runs a VirtualMachine whose DataVolumes have succeeded", func() {
		importedDataVolume(ns, "system")
		seen := record(&kubevirtv1.VirtualMachineList{}, ns, describeVM)
		create(newVM(ns, "sequoia", "system"))

		Eventually(printableStatus(ns, "sequoia")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		Eventually(seen.Reported).WithTimeout(timeout).Should(Equal([]string{"Starting", "Running"}))

		// virt-controller reads Ready from the instance's Ready condition,
		// which follows the launcher pod's readiness: it may come a sync
		// after Running.
		Eventually(func(g Gomega) {
			vm, err := getVM(ns, "sequoia")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vm.Status.Created).To(BeTrue())
			g.Expect(vm.Status.Ready).To(BeTrue())
			g.Expect(vm.Status.Conditions).To(vmCondition("Ready", corev1.ConditionTrue, ""))
		}).WithTimeout(timeout).Should(Succeed())
		vm, err := getVM(ns, "sequoia")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Finalizers).To(ContainElement(kubevirtv1.VirtualMachineControllerFinalizer))

		vmi, err := getVMI(ns, "sequoia")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		Expect(vmi.Status.NodeName).To(Equal(simulator.DefaultNodeName))
		pods := &corev1.PodList{}
		Expect(k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)})).To(Succeed())
		Expect(pods.Items).To(HaveLen(1))
		ip := pods.Items[0].Status.PodIP
		Expect(ip).To(MatchRegexp(`^10\.244\.\d+\.\d+$`))
		Expect(vmi.Status.Interfaces).To(ConsistOf(MatchFields(IgnoreExtras, Fields{
			"Name": Equal("default"), "IP": Equal(ip), "IPs": Equal([]string{ip}),
		})))
		Expect(vmi.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type": Equal(kubevirtv1.VirtualMachineInstanceReady), "Status": Equal(corev1.ConditionTrue),
		})))
		Expect(metav1.IsControlledBy(vmi, vm)).To(BeTrue())
		Expect(vmi.Labels).To(HaveKeyWithValue("kubevirt.io/domain", "sequoia"))
		Expect(vmi.Annotations).To(HaveKeyWithValue("macvirt.io/test", "template"))
		Expect(vmi.Spec.Volumes).To(Equal(vm.Spec.Template.Spec.Volumes))
	})

	It("creates the instance at once and holds it Pending, its PVC not found, while a standalone DataVolume does not exist", func() {
		seen := record(&kubevirtv1.VirtualMachineList{}, ns, describeVM)
		create(newVM(ns, "mac", "disk"))
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusPvcNotFound))
		vmi, err := getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Pending))
		Expect(vmi.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type": BeEquivalentTo(corev1.PodScheduled), "Status": Equal(corev1.ConditionFalse),
			"Reason": Equal(corev1.PodReasonUnschedulable), "Message": Equal("PVC " + ns + "/disk does not exist, waiting for it to appear"),
		})))
		Consistently(vmiPhase(ns, "mac")).WithTimeout(2 * startDelay).Should(Equal(kubevirtv1.Pending))

		create(newDataVolume(ns, "disk"))
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		Eventually(seen.Reported).WithTimeout(timeout).Should(inOrder("ErrorPvcNotFound", "Running"))
	})

	It("reports DataVolumeError while CDI retries a failing import of a DataVolume it uses, and keeps its instance Pending", func() {
		fault := simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: ns, Name: "disk"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		create(newDataVolume(ns, "disk"))
		phases := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return string(vmi.Status.Phase)
		})
		create(newVM(ns, "mac", "disk"))

		// CDI retries a failing import (phase stays ImportInProgress,
		// Running=False reason Error), which KubeVirt reports as
		// DataVolumeError (pkg/storage/types/dv.go, HasDataVolumeErrors).
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusDataVolumeError))
		// The instance created at once fails only with a DataVolume in
		// phase Failed (lifecycle.go, HasFailedDataVolumes), which a
		// retried import never reaches: it waits, Pending.
		Consistently(printableStatus(ns, "mac")).WithTimeout(2 * startDelay).Should(Equal(kubevirtv1.VirtualMachineStatusDataVolumeError))
		Expect(phases.Seen()).NotTo(ContainElement(string(kubevirtv1.Failed)))
		Expect(phases.Seen()).NotTo(ContainElement(string(kubevirtv1.Scheduling)))
	})

	It("creates the DataVolumes of its dataVolumeTemplates and runs once they are imported", func() {
		vm := newVM(ns, "mac", "root")
		vm.Spec.DataVolumeTemplates = []kubevirtv1.DataVolumeTemplateSpec{{
			ObjectMeta: metav1.ObjectMeta{Name: "root"},
			Spec:       newDataVolume(ns, "root").Spec,
		}}
		create(vm)

		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		dv, err := getDataVolume(ns, "root")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Status.Phase).To(Equal(cdiv1.Succeeded))
		Expect(dv.OwnerReferences).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Kind": Equal("VirtualMachine"), "Name": Equal("mac"), "Controller": Equal(ptr.To(true)),
		})))
	})

	It("leaves a Halted VirtualMachine Stopped", func() {
		vm := newVM(ns, "mac")
		vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
		create(vm)

		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusStopped))
		Consistently(vmiNotFound(ns, "mac")).WithTimeout(2 * startDelay).Should(BeTrue())
	})

	It("keeps the instance Scheduling and reports ErrorUnschedulable while no node fits", func() {
		fault := simulator.Fault{Kind: simulator.Unschedulable, Namespace: ns, Name: "mac"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		importedDataVolume(ns, "disk")
		create(newVM(ns, "mac", "disk"))

		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusUnschedulable))
		vmi, err := getVMI(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Scheduling))
		Expect(vmi.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type":    BeEquivalentTo(corev1.PodScheduled),
			"Status":  Equal(corev1.ConditionFalse),
			"Reason":  Equal(corev1.PodReasonUnschedulable),
			"Message": ContainSubstring("nodes are available"),
		})))
		vm, err := getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.Conditions).To(vmCondition("PodScheduled", corev1.ConditionFalse, corev1.PodReasonUnschedulable))

		sim.Clear(fault)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vm, err = getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.Conditions).NotTo(vmCondition("PodScheduled", corev1.ConditionFalse, corev1.PodReasonUnschedulable))
	})

	It("backs off a crash-looping VirtualMachine and runs it once the fault is cleared", func() {
		fault := simulator.Fault{Kind: simulator.CrashLoop, Namespace: ns, Name: "mac"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		importedDataVolume(ns, "disk")
		phases := record(&kubevirtv1.VirtualMachineInstanceList{}, ns, func(vmi *kubevirtv1.VirtualMachineInstance) string {
			return string(vmi.Status.Phase)
		})
		create(newVM(ns, "mac", "disk"))

		Eventually(func(g Gomega) {
			vm, err := getVM(ns, "mac")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusCrashLoopBackOff))
			g.Expect(vm.Status.StartFailure).NotTo(BeNil())
			g.Expect(vm.Status.StartFailure.ConsecutiveFailCount).To(BeNumerically(">=", 1))
			g.Expect(vm.Status.StartFailure.RetryAfterTimestamp).NotTo(BeNil())
		}).WithTimeout(timeout).Should(Succeed())
		Eventually(phases.Seen).WithTimeout(timeout).Should(ContainElement(string(kubevirtv1.Failed)))
		Expect(phases.Seen()).NotTo(ContainElement(string(kubevirtv1.Running)))

		sim.Clear(fault)
		Eventually(printableStatus(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vm, err := getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(vm.Status.StartFailure).To(BeNil())
	})

	It("shuts the instance down and removes it when the VirtualMachine is deleted", func() {
		importedDataVolume(ns, "disk")
		create(newVM(ns, "mac", "disk"))
		Eventually(vmiPhase(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.Running))
		seen := record(&kubevirtv1.VirtualMachineList{}, ns, describeVM)

		vm, err := getVM(ns, "mac")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Delete(ctx, vm)).To(Succeed())

		Eventually(vmiNotFound(ns, "mac")).WithTimeout(timeout).Should(BeTrue())
		Eventually(func() bool {
			_, err := getVM(ns, "mac")
			return apierrors.IsNotFound(err)
		}).WithTimeout(timeout).Should(BeTrue())
		Eventually(seen.Seen).WithTimeout(timeout).Should(ContainElement(string(kubevirtv1.VirtualMachineStatusTerminating)))
	})
})
