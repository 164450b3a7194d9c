package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

var _ = Describe("MacMachine launch", func() {
	var ns string
	BeforeEach(func() {
		DeferCleanup(startOperator())
		ns = newNamespace()
		DeferCleanup(clock.Reset)
	})

	// named creates a machine of a fresh class under a fixed name, which is
	// also its VirtualMachine's, so faults can be injected beforehand.
	named := func(name string) types.NamespacedName {
		k := key(newMachine(ns, newClass().Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", name }))
		DeferCleanup(deleteAndWait, k)
		return k
	}
	// ready creates a machine and waits until it is Ready.
	ready := func(name string) types.NamespacedName {
		k := named(name)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		heartbeat(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
		return k
	}

	It("is Stalled, in KubeVirt's words, while its hook sidecar image cannot be pulled, and starts once it can", func() {
		fault := simulator.Fault{Kind: simulator.ImagePullFailed, Namespace: ns, Name: "nopull"}
		sim.Inject(fault)
		k := named("nopull")

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonImagePullFailed),
			HaveField("Message", ContainSubstring("ghcr.io/macvirt/macvirt-domain-hook:test"))))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachineStarting))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", macvirtv1alpha1.ReasonImagePullFailed)))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonImagePullFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		sim.Clear(fault)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionFalse))
	})

	It("is Stalled with virt-api's refusal while the Sidecar feature gate is off, and starts once it is on", func() {
		By("the cluster's KubeVirt loses the Sidecar gate the suite's operator needs (its Plugins gate is off too)")
		setKubeVirtFeatureGates()
		DeferCleanup(setKubeVirtFeatureGates, "Sidecar")
		k := named("nogate")

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonCreateFailed),
			HaveField("Message", ContainSubstring(`admission webhook "virtualmachine-validator.kubevirt.io" denied the request: `+
				"sidecar feature gate is not enabled in kubevirt-config"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionTrue))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonCreateFailed)).WithTimeout(timeout).ShouldNot(BeEmpty())

		setKubeVirtFeatureGates("Sidecar")
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})

	It("retries, and does not fail, an instance that failed early while its disks were importing", func() {
		// The first instance's domain fails before it runs, as when its
		// launcher dies.
		fault := simulator.Fault{Kind: simulator.CrashLoop, Namespace: ns, Name: "early"}
		sim.Inject(fault)
		k := named("early")
		var failedUID types.UID
		Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(k8sClient.Get(context.Background(), k, vmi)).To(Succeed())
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Failed))
			failedUID = vmi.UID
		}).WithTimeout(timeout).Should(Succeed())
		sim.Clear(fault)
		Expect(phase(k)()).NotTo(Equal(macvirtv1alpha1.MachineFailed))

		Eventually(func() macvirtv1alpha1.MachinePhase {
			expireStartBackoff(k)
			return phase(k)()
		}).Should(Equal(macvirtv1alpha1.MachineBooting))
		vmi := &kubevirtv1.VirtualMachineInstance{}
		Expect(k8sClient.Get(context.Background(), k, vmi)).To(Succeed())
		Expect(vmi.UID).NotTo(Equal(failedUID))
	})

	It("is Stalled while paused and Ready again once resumed", func() {
		k := ready("paused")
		fault := simulator.Fault{Kind: simulator.Paused, Namespace: ns, Name: "paused"}
		sim.Inject(fault)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonPaused), HaveField("Message", ContainSubstring("VMI was paused by user"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionTrue))

		sim.Clear(fault)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
	})

	It("stays Ready while KubeVirt migrates it", func() {
		k := ready("moving")
		fault := simulator.Fault{Kind: simulator.Migrating, Namespace: ns, Name: "moving"}
		sim.Inject(fault)
		Eventually(func() kubevirtv1.VirtualMachinePrintableStatus { return vmOf(k)().Status.PrintableStatus }).
			WithTimeout(timeout).Should(Equal(kubevirtv1.VirtualMachineStatusMigrating))
		touch(k)
		Consistently(phase(k)).WithTimeout(time.Second).Should(Equal(macvirtv1alpha1.MachineReady))
		sim.Clear(fault)
	})

	It("shows a lost node's failed instance and boots again on a new one", func() {
		k := ready("lost")
		first := &kubevirtv1.VirtualMachineInstance{}
		Expect(k8sClient.Get(context.Background(), k, first)).To(Succeed())
		sim.Inject(simulator.Fault{Kind: simulator.NodeLost, Namespace: ns, Name: "lost"})
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonInstanceFailed)).WithTimeout(timeout).Should(
			ContainElement(HaveField("Note", ContainSubstring("reason NodeUnresponsive"))))
		Eventually(func(g Gomega) {
			vmi := &kubevirtv1.VirtualMachineInstance{}
			g.Expect(k8sClient.Get(context.Background(), k, vmi)).To(Succeed())
			g.Expect(vmi.UID).NotTo(Equal(first.UID))
			g.Expect(vmi.Status.Phase).To(Equal(kubevirtv1.Running))
		}).WithTimeout(timeout).Should(Succeed())
		heartbeat(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
	})
})
