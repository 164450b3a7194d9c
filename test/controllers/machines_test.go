package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/guestprotocol"
	"github.com/macvirt/macvirt/internal/render"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

var _ = Describe("MacMachine", func() {
	var ns string
	BeforeEach(func() {
		DeferCleanup(startOperator())
		ns = newNamespace()
		DeferCleanup(clock.Reset)
	})

	// booted creates a machine and waits until its VM runs.
	booted := func(class string, mods ...func(*macvirtv1alpha1.MacMachine)) types.NamespacedName {
		k := key(newMachine(ns, class, mods...))
		DeferCleanup(deleteAndWait, k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		return k
	}

	It("gives the machine a guest-agent token: the Secret its config disk is made of, and only the hash on the machine", func() {
		k := booted(newClass().Name)
		m := getMachine(k)
		hash := m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
		Expect(hash).To(HaveLen(64))
		secret := &corev1.Secret{}
		name := m.Annotations[macvirtv1alpha1.AnnotationAgentSecret]
		Expect(name).To(Equal(k.Name+"-agent-"+hash[:10]), "the Secret is named after its token, so a second token gets a second Secret")
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, secret)).To(Succeed())
		Expect(secret.Data).To(HaveKeyWithValue("endpoint", []byte("https://agent.test:9444")))
		Expect(secret.Data).To(HaveKeyWithValue("ca.crt", []byte("test CA bundle")))
		Expect(secret.Data).To(HaveKeyWithValue("namespace", []byte(ns)))
		Expect(secret.Data).To(HaveKeyWithValue("machine", []byte(k.Name)))
		Expect(guestprotocol.HashToken(string(secret.Data["token"]))).To(Equal(hash), "the Secret's token is the one whose hash the machine records")
		Expect(secret.OwnerReferences).To(ContainElement(HaveField("UID", m.UID)), "the Secret goes with its machine")

		vm := &kubevirtv1.VirtualMachine{}
		Expect(k8sClient.Get(context.Background(), k, vm)).To(Succeed())
		Expect(vm.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", name)))
	})

	It("renews the agent token when its hash annotation is deleted: a new Secret, which the VM mounts from its next start", func() {
		k := booted(newClass().Name)
		m := getMachine(k)
		oldHash, oldSecret := m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash], m.Annotations[macvirtv1alpha1.AnnotationAgentSecret]
		before := m.DeepCopy()
		delete(m.Annotations, macvirtv1alpha1.AnnotationAgentTokenHash)
		Expect(k8sClient.Patch(context.Background(), m, client.MergeFrom(before))).To(Succeed())

		Eventually(func(g Gomega) string {
			return getMachineWith(g, k).Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]
		}).
			WithTimeout(timeout).ShouldNot(Or(BeEmpty(), Equal(oldHash)))
		renewed := getMachine(k)
		name := renewed.Annotations[macvirtv1alpha1.AnnotationAgentSecret]
		Expect(name).NotTo(Equal(oldSecret), "a renewed token is a new Secret; the old one is never rewritten")
		secret := &corev1.Secret{}
		Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, secret)).To(Succeed())
		Expect(guestprotocol.HashToken(string(secret.Data["token"]))).To(Equal(renewed.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash]))
		Eventually(func() string { return agentSecretOf(vmOf(k)().Spec.Template.Spec.Volumes) }).WithTimeout(timeout).
			Should(Equal(name), "the VM is pointed at the renewed Secret")

		setRunning(k, false)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineStopped))
		setRunning(k, true)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		vmi := &kubevirtv1.VirtualMachineInstance{}
		Expect(k8sClient.Get(context.Background(), k, vmi)).To(Succeed())
		Expect(agentSecretOf(vmi.Spec.Volumes)).To(Equal(name), "the restarted guest reads the renewed token")
	})

	It("walks Pending, Provisioning, Starting, Booting to Ready on the first heartbeat", func() {
		class := newClass()
		k := key(newMachine(ns, class.Name))
		DeferCleanup(deleteAndWait, k)
		seen := map[macvirtv1alpha1.MachinePhase]bool{}
		Eventually(func(g Gomega) macvirtv1alpha1.MachinePhase {
			m := getMachineWith(g, k)
			seen[m.Status.Phase] = true
			if m.Status.Phase == macvirtv1alpha1.MachineProvisioning {
				g.Expect(m.Status.Provisioning).NotTo(BeNil(), "a provisioning machine reports its progress")
			}
			return m.Status.Phase
		}).WithTimeout(timeout).WithPolling(10 * time.Millisecond).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(seen).To(HaveKey(macvirtv1alpha1.MachineProvisioning))

		m := getMachine(k)
		Expect(m.Finalizers).To(ContainElement(macvirtv1alpha1.MachineFinalizer))
		Expect(m.Spec.SMBIOS).NotTo(BeNil())
		Expect(m.Spec.ClassRevision).NotTo(BeEmpty())
		Expect(m.Status.NodeName).NotTo(BeEmpty())
		Expect(m.Status.VirtualMachineName).To(Equal(k.Name))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionDisksReady)().Status).To(Equal(metav1.ConditionTrue))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionVMRunning)().Status).To(Equal(metav1.ConditionTrue))
		Expect(ownedBy(k)(Default)).To(Equal(owned{VMs: 1, VMIs: 1, DataVolumes: 2}))

		heartbeat(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)().Status).To(Equal(metav1.ConditionTrue))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionGuestAgentReady)().Status).To(Equal(metav1.ConditionTrue))
	})

	It("records an event for each phase change", func() {
		k := booted(newClass().Name)
		Eventually(func(g Gomega) []string {
			var list eventsv1.EventList
			g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				if e.Regarding.Name == k.Name {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).WithTimeout(timeout).Should(ContainElements("MachineProvisioning", "MachineBooting"))
	})

	It("stays Pending with ClassNotFound until its class exists", func() {
		k := key(newMachine(ns, "not-yet-"+ns))
		DeferCleanup(deleteAndWait, k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonClassNotFound),
			HaveField("Message", ContainSubstring("not-yet-"+ns))))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachinePending))
		newClass(func(c *macvirtv1alpha1.MacClass) { c.GenerateName, c.Name = "", "not-yet-"+ns })
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})

	It("fails when a DataVolume fails, and says which", func() {
		class := newClass()
		m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Name: "dvfail", Namespace: ns},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name}}
		sim.Inject(simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: ns, Name: "dvfail-system"})
		Expect(k8sClient.Create(context.Background(), m)).To(Succeed())
		k := key(m)
		DeferCleanup(deleteAndWait, k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineFailed))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)()).To(And(
			HaveField("Reason", macvirtv1alpha1.ReasonDataVolumeFailed), HaveField("Message", ContainSubstring("dvfail-system"))))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)().Status).To(Equal(metav1.ConditionTrue))
	})

	It("shows the scheduler's message while the VM cannot be scheduled", func() {
		class := newClass()
		sim.Inject(simulator.Fault{Kind: simulator.Unschedulable, Namespace: ns, Name: "nonode"})
		m := newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", "nonode" })
		k := key(m)
		DeferCleanup(deleteAndWait, k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(
			HaveField("Reason", macvirtv1alpha1.ReasonUnschedulable))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachineStarting))
		sim.Clear(simulator.Fault{Kind: simulator.Unschedulable, Namespace: ns, Name: "nonode"})
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})

	It("fails when the VM crash-loops", func() {
		class := newClass()
		sim.Inject(simulator.Fault{Kind: simulator.CrashLoop, Namespace: ns, Name: "crashy"})
		k := key(newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", "crashy" }))
		DeferCleanup(sim.Clear, simulator.Fault{Kind: simulator.CrashLoop, Namespace: ns, Name: "crashy"})
		DeferCleanup(deleteAndWait, k)
		// virt-controller waits 10-15 s after the first failed start and
		// 40-60 s after the second (calculateStartBackoffTime in
		// pkg/virt-controller/watch/vm/vm.go), waits the test skips; the
		// third fails the machine. Until then it is only StartFailed.
		var counts []int
		seen := func(f *kubevirtv1.VirtualMachineStartFailure) {
			if f != nil && (len(counts) == 0 || counts[len(counts)-1] != f.ConsecutiveFailCount) {
				counts = append(counts, f.ConsecutiveFailCount)
			}
		}
		Eventually(func() macvirtv1alpha1.MachinePhase {
			seen(expireStartBackoff(k))
			return phase(k)()
		}).WithTimeout(time.Minute).Should(Equal(macvirtv1alpha1.MachineFailed))
		seen(vmOf(k)().Status.StartFailure)
		Expect(counts).To(Equal([]int{1, 2, 3}), "virt-controller started it three times, each after its backoff")
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)().Reason).To(Equal(macvirtv1alpha1.ReasonCrashLoop))
	})

	It("fails when no heartbeat arrives within bootTimeout, and stays Failed", func() {
		k := booted(newClass().Name)
		clock.Advance(21 * time.Minute)
		touch(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineFailed))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionReady)().Reason).To(Equal(macvirtv1alpha1.ReasonBootTimeout))
		heartbeat(k)
		Consistently(phase(k)).WithTimeout(time.Second).Should(Equal(macvirtv1alpha1.MachineFailed), "Failed is terminal")
	})

	It("is not Ready once the heartbeat is older than heartbeatTimeout", func() {
		k := booted(newClass().Name)
		heartbeat(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
		clock.Advance(3 * time.Minute)
		touch(k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonHeartbeatStale)))
		heartbeat(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineReady))
	})

	It("stops gracefully on running=false, keeps the disks, and starts again on running=true", func() {
		k := booted(newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.ShutdownGracePeriod = &metav1.Duration{Duration: 90 * time.Second}
		}).Name)
		setRunning(k, false)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineStopped))
		Expect(ownedBy(k)(Default)).To(Equal(owned{VMs: 1, VMIs: 0, DataVolumes: 2}))
		Expect(*vmOf(k)().Spec.RunStrategy).To(Equal(kubevirtv1.RunStrategyHalted))
		Expect(stopRequestsFor(k)).To(ConsistOf(HaveField("GracePeriod", HaveValue(Equal(int64(90))))))

		setRunning(k, true)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(ownedBy(k)(Default)).To(Equal(owned{VMs: 1, VMIs: 1, DataVolumes: 2}))
	})

	It("on deletion stops gracefully, waits for the VMI to go, then deletes VM and DataVolumes", func() {
		k := booted(newClass().Name)
		w, err := watchClient().Watch(context.Background(), &kubevirtv1.VirtualMachineList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		Expect(k8sClient.Delete(context.Background(), getMachine(k))).To(Succeed())
		Eventually(func() bool { return vmiGoneWhenVMDeleted(w, k) }).WithTimeout(timeout).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), k, &macvirtv1alpha1.MacMachine{}))
		}).WithTimeout(timeout).Should(BeTrue())
		Expect(ownedBy(k)(Default)).To(Equal(owned{}))
		Expect(stopRequestsFor(k)).To(HaveLen(1))
	})

	It("keeps the VM and reports Stalled when the stop request fails", func() {
		k := booted(newClass().Name)
		stopAPI.failWith.Store(403)
		DeferCleanup(func() { stopAPI.failWith.Store(0) })
		Expect(k8sClient.Delete(context.Background(), getMachine(k))).To(Succeed())
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionStalled)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", macvirtv1alpha1.ReasonStopFailed),
			HaveField("Message", ContainSubstring(`"update" on "virtualmachines/stop" in API group "subresources.kubevirt.io"`)),
			HaveField("Message", ContainSubstring("not deleted"))))
		Eventually(func() []eventsv1.Event { return warningsIn(ns, macvirtv1alpha1.ReasonStopFailed) }).WithTimeout(timeout).Should(
			ContainElement(HaveField("Note", ContainSubstring("graceful stop failed"))), "a Warning event says a human is needed")
		Consistently(ownedBy(k)).WithTimeout(2 * time.Second).Should(Equal(owned{VMs: 1, VMIs: 1, DataVolumes: 2}))
		Expect(*vmOf(k)().Spec.RunStrategy).To(Equal(kubevirtv1.RunStrategyAlways))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachineTerminating))

		stopAPI.failWith.Store(0)
		Eventually(ownedBy(k)).WithTimeout(timeout).Should(Equal(owned{}))
	})

	It("reads the AppleSMC key and reports Stalled when its Secret is missing", func() {
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: ns, Name: "osk", Key: "osk"}}
		})
		k := key(newMachine(ns, class.Name))
		DeferCleanup(deleteAndWait, k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionStalled)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", macvirtv1alpha1.ReasonSecretUnavailable)))
		Expect(ownedBy(k)(Default)).To(Equal(owned{}))
		By("a key that holds something else than the OSK: nothing is copied from it")
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "osk", Namespace: ns},
			Data: map[string][]byte{"osk": []byte("a-token-of-another-operator")}}
		Expect(k8sClient.Create(context.Background(), secret)).To(Succeed())
		touch(k)
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionStalled)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonSecretUnavailable),
			HaveField("Message", And(ContainSubstring("does not hold the AppleSMC OSK"), Not(ContainSubstring("a-token"))))))
		Expect(ownedBy(k)(Default)).To(Equal(owned{}), "no VM carries the Secret's value")
		By("the OSK")
		secret.Data["osk"] = []byte(appleOSK)
		Expect(k8sClient.Update(context.Background(), secret)).To(Succeed())
		touch(k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(vmOf(k)().Spec.Template.ObjectMeta.Annotations["macvirt.io/domain-hook"]).To(ContainSubstring(`"osk":"` + appleOSK + `"`))
	})
})

// appleOSK is the string every Apple SMC answers with, public since 2006.
const appleOSK = "ourhardworkbythesewordsguardedpleasedontsteal(c)AppleComputerInc"

func setRunning(k types.NamespacedName, running bool) {
	m := getMachine(k)
	before := m.DeepCopy()
	m.Spec.Running = &running
	Expect(k8sClient.Patch(context.Background(), m, client.MergeFrom(before))).To(Succeed())
}

func stopRequestsFor(k types.NamespacedName) []stopRequest {
	return stopAPI.requests(k)
}

func watchClient() client.WithWatch {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// vmiGoneWhenVMDeleted drains VM watch events and, at the first sign of the
// VM's deletion, asserts its VMI no longer exists.
func vmiGoneWhenVMDeleted(w watch.Interface, k types.NamespacedName) bool {
	for {
		select {
		case ev := <-w.ResultChan():
			vm, ok := ev.Object.(*kubevirtv1.VirtualMachine)
			if !ok || vm.Name != k.Name {
				continue
			}
			if ev.Type == watch.Deleted || !vm.DeletionTimestamp.IsZero() {
				err := k8sClient.Get(context.Background(), k, &kubevirtv1.VirtualMachineInstance{})
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the VM was deleted while its VMI still existed")
				return true
			}
		default:
			return false
		}
	}
}

// agentSecretOf is the Secret of the agent's config disk among volumes.
func agentSecretOf(volumes []kubevirtv1.Volume) string {
	for _, v := range volumes {
		if v.Name == render.AgentConfigVolume && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}
