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

package kubevirt_test

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// sampleClaim is config/samples' claim.
var sampleClaim = types.NamespacedName{Namespace: "default", Name: "ios-build"}

var _ = Describe("A Mac under KubeVirt's own control plane", Ordered, func() {
	var machine *macvirtv1alpha1.MacMachine

	It("is a VM that virt-controller turns into a VMI and a virt-launcher pod on an Apple node", func() {
		claim := readyClaim(sampleClaim)
		machine = machineOf(claim)
		vm := &kubevirtv1.VirtualMachine{}
		Expect(admin.Get(ctx, types.NamespacedName{Namespace: machine.Namespace, Name: machine.Status.VirtualMachineName}, vm)).To(Succeed())
		Expect(vm.Status.PrintableStatus).To(Equal(kubevirtv1.VirtualMachineStatusRunning))
		vmi := &kubevirtv1.VirtualMachineInstance{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(vm), vmi)).To(Succeed())
		Expect(managers(vmi)).To(ContainElement("virt-controller"), "the VMI is virt-controller's")
		Expect(metav1.GetControllerOf(vmi).UID).To(Equal(vm.UID))

		pods := &corev1.PodList{}
		Expect(admin.List(ctx, pods, client.InNamespace(vmi.Namespace),
			client.MatchingLabels{kubevirtv1.CreatedByLabel: string(vmi.UID)})).To(Succeed())
		Expect(pods.Items).To(HaveLen(1))
		pod := &pods.Items[0]
		Expect(managers(pod)).To(ContainElement("virt-controller"), "the launcher pod is virt-controller's")
		Expect(pod.Spec.NodeSelector).To(HaveKeyWithValue(kubevirtv1.NodeSchedulable, "true"))
		Expect(pod.Spec.NodeName).To(And(HavePrefix("apple-node-"), Equal(vmi.Status.NodeName), Equal(machine.Status.NodeName)))
		Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		Expect(machine.Status.Addresses).To(ContainElement(pod.Status.PodIP))
	})

	It("stops through virt-api's stop subresource, gracefully, when its claim goes", func() {
		vmKey := types.NamespacedName{Namespace: machine.Namespace, Name: machine.Status.VirtualMachineName}
		vmis, err := admin.Watch(ctx, &kubevirtv1.VirtualMachineInstanceList{}, client.InNamespace(vmKey.Namespace),
			client.MatchingFields{"metadata.name": vmKey.Name})
		Expect(err).NotTo(HaveOccurred())
		defer vmis.Stop()
		vms, err := admin.Watch(ctx, &kubevirtv1.VirtualMachineList{}, client.InNamespace(vmKey.Namespace),
			client.MatchingFields{"metadata.name": vmKey.Name})
		Expect(err).NotTo(HaveOccurred())
		defer vms.Stop()

		claim := &macvirtv1alpha1.MacClaim{}
		Expect(admin.Get(ctx, sampleClaim, claim)).To(Succeed())
		Expect(admin.Delete(ctx, claim)).To(Succeed())

		By("virt-api halts the VM: the stop subresource's write")
		var halted *kubevirtv1.VirtualMachine
		Eventually(vms.ResultChan()).Should(Receive(WithTransform(func(ev watch.Event) bool {
			vm, ok := ev.Object.(*kubevirtv1.VirtualMachine)
			if ok && vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted {
				halted = vm
				return true
			}
			return false
		}, BeTrue())))
		Expect(managers(halted)).To(ContainElement("virt-api"))

		By("the domain shuts down: Running, then Succeeded, then gone")
		var phases []kubevirtv1.VirtualMachineInstancePhase
		Eventually(vmis.ResultChan()).Should(Receive(WithTransform(func(ev watch.Event) bool {
			if vmi, ok := ev.Object.(*kubevirtv1.VirtualMachineInstance); ok &&
				(len(phases) == 0 || phases[len(phases)-1] != vmi.Status.Phase) {
				phases = append(phases, vmi.Status.Phase)
			}
			return ev.Type == watch.Deleted
		}, BeTrue())))
		Expect(phases).To(Equal([]kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Running, kubevirtv1.Succeeded}))
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(machine), machine))
		}).Should(BeTrue(), "the machine goes once its VM is stopped")
	})

	It("shows virt-api's refusal of its VM on the machine, and recovers when the cluster allows it", func() {
		By("the cluster's KubeVirt loses its Sidecar gate, which the operator's domain hook needs here")
		setFeatureGates()
		DeferCleanup(setFeatureGates, "Sidecar")

		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "refused"},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: "sonoma", ReclaimPolicy: macvirtv1alpha1.ReclaimDelete}}
		Expect(admin.Create(ctx, claim)).To(Succeed())
		var refusal string
		Eventually(func() string {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(claim), claim)).To(Succeed())
			if claim.Status.MachineRef == nil {
				return "no machine yet"
			}
			m := machineOf(claim)
			c := meta.FindStatusCondition(m.Status.Conditions, macvirtv1alpha1.ConditionReady)
			if c == nil {
				return "no Ready condition"
			}
			refusal = c.Reason + ": " + c.Message
			return refusal
		}).Should(And(
			HavePrefix(macvirtv1alpha1.ReasonCreateFailed+": "),
			ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request`),
			ContainSubstring("Sidecar")))
		GinkgoWriter.Printf("the machine's Ready condition: %s\n", refusal)

		By("the gate is back: the same claim's Mac becomes Ready")
		setFeatureGates("Sidecar")
		readyClaim(client.ObjectKeyFromObject(claim))
	})
})

// readyClaim waits for the claim to be Ready and returns it.
func readyClaim(key types.NamespacedName) *macvirtv1alpha1.MacClaim {
	GinkgoHelper()
	claim := &macvirtv1alpha1.MacClaim{}
	Eventually(func() macvirtv1alpha1.ClaimPhase {
		Expect(admin.Get(ctx, key, claim)).To(Succeed())
		return claim.Status.Phase
	}).Should(Equal(macvirtv1alpha1.ClaimReady))
	return claim
}

// machineOf returns the claim's machine.
func machineOf(claim *macvirtv1alpha1.MacClaim) *macvirtv1alpha1.MacMachine {
	GinkgoHelper()
	Expect(claim.Status.MachineRef).NotTo(BeNil())
	m := &macvirtv1alpha1.MacMachine{}
	Expect(admin.Get(ctx, types.NamespacedName{Namespace: claim.Status.MachineRef.Namespace, Name: claim.Status.MachineRef.Name}, m)).To(Succeed())
	return m
}

// managers are the field managers that wrote obj: the programs that created
// or changed it.
func managers(obj client.Object) []string {
	var out []string
	for _, f := range obj.GetManagedFields() {
		if !slices.Contains(out, f.Manager) {
			out = append(out, f.Manager)
		}
	}
	return out
}

// setFeatureGates sets the KubeVirt CR's feature gates.
func setFeatureGates(gates ...string) {
	GinkgoHelper()
	Expect(cluster.SetKubeVirtFeatureGates(ctx, admin, gates...)).To(Succeed())
}
