package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// vmiGone reports that the machine's VirtualMachineInstance no longer exists.
func vmiGone(k types.NamespacedName) func() bool {
	return func() bool {
		err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: k.Namespace, Name: vmOf(k)().Name},
			&kubevirtv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err)
	}
}

var _ = Describe("The guest's power", func() {
	BeforeEach(func() {
		DeferCleanup(startOperator())
		DeferCleanup(clock.Reset)
	})

	// readyClaim creates an on-demand claim of a class built with mod and
	// returns it and its machine once it is Ready, heartbeats running.
	readyClaim := func(mod func(*macvirtv1alpha1.MacClass)) (*macvirtv1alpha1.MacClaim, types.NamespacedName) {
		ns := newNamespace()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.OnDemand = ptrTo(true)
			mod(c)
		})
		claim := newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		Eventually(func(g Gomega) *macvirtv1alpha1.ObjectRef { return getClaimWith(g, key(claim)).Status.MachineRef }).WithTimeout(timeout).ShouldNot(BeNil())
		ref := getClaim(key(claim)).Status.MachineRef
		k := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
		startGuests(k.Namespace)
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		return claim, k
	}

	It("a guest that ignores ACPI and is killed after the grace period is reported as a forced power-off on the machine and its claim", func() {
		claim, k := readyClaim(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Lifecycle.ShutdownGracePeriod = &metav1.Duration{Duration: time.Second}
		})
		sim.Inject(simulator.Fault{Kind: simulator.IgnoreACPI, Namespace: k.Namespace, Name: vmOf(k)().Name})

		m := getMachine(k)
		m.Spec.Running = ptrTo(false)
		Expect(k8sClient.Update(context.Background(), m)).To(Succeed())

		Eventually(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Reason", macvirtv1alpha1.ReasonForcedPowerOff),
			HaveField("Message", ContainSubstring(`KubeVirt killed it (VirtualMachineInstance `)),
			HaveField("Message", ContainSubstring(`"The VirtualMachineInstance crashed."`))))
		Expect(phase(k)()).To(Equal(macvirtv1alpha1.MachineStopped))
		Expect(conditionOf(k, macvirtv1alpha1.ConditionStalled)()).To(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", macvirtv1alpha1.ReasonForcedPowerOff)))
		Eventually(warningsAbout(k.Name, macvirtv1alpha1.ReasonForcedPowerOff)).WithTimeout(timeout).Should(HaveLen(1))
		Eventually(claimCondition(key(claim), macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", macvirtv1alpha1.ReasonForcedPowerOff),
			HaveField("Message", ContainSubstring("KubeVirt killed it"))))
		Expect(claimCondition(key(claim), macvirtv1alpha1.ConditionStalled)()).To(And(HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", macvirtv1alpha1.ReasonForcedPowerOff), HaveField("Message", ContainSubstring("First Aid"))))
		Eventually(warningsAbout(claim.Name, macvirtv1alpha1.ReasonForcedPowerOff)).WithTimeout(timeout).Should(HaveLen(1))

		By("the forced power-off stays on the machine once the instance is gone")
		Eventually(vmiGone(k)).WithTimeout(timeout).Should(BeTrue())
		touch(k)
		Consistently(conditionOf(k, macvirtv1alpha1.ConditionReady)).WithTimeout(time.Second).Should(
			HaveField("Reason", macvirtv1alpha1.ReasonForcedPowerOff))
	})

	It("a shutdown from the macOS menu on a claimed machine keeps the claim bound, says why it is not Ready, and is Ready again", func() {
		claim, k := readyClaim(func(*macvirtv1alpha1.MacClass) {})
		uid := getMachine(k).UID

		// The new instance may run before a poll sees the claim: a watch
		// sees every status the claim had (claims record no events on the
		// way to Ready and back).
		wc, err := client.NewWithWatch(cfg, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(context.Background(), &macvirtv1alpha1.MacClaimList{}, client.InNamespace(claim.Namespace),
			client.MatchingFields{"metadata.name": claim.Name})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(w.Stop)
		Expect(sim.ShutDownGuest(context.Background(), types.NamespacedName{Namespace: k.Namespace, Name: vmOf(k)().Name})).To(Succeed())
		var notes []string
		Eventually(func() []string {
			for {
				select {
				case ev := <-w.ResultChan():
					if c, ok := ev.Object.(*macvirtv1alpha1.MacClaim); ok && c.Status.Phase == macvirtv1alpha1.ClaimBound {
						if rc := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady); rc != nil {
							notes = append(notes, rc.Message)
						}
					}
				default:
					return notes
				}
			}
		}).WithTimeout(timeout).Should(ContainElement(ContainSubstring("macOS shut itself down")))

		By("KubeVirt starts a new instance; macOS boots and heartbeats")
		Eventually(conditionOf(k, macvirtv1alpha1.ConditionVMRunning)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionTrue))
		clock.Advance(time.Minute)
		Eventually(claimPhase(key(claim))).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.ClaimReady))
		Expect(getMachine(k).UID).To(Equal(uid))
		Expect(getClaim(key(claim)).Status.MachineRef.UID).To(Equal(uid))
		Expect(warningsAbout(claim.Name, "Claim"+string(macvirtv1alpha1.ClaimLost))()).To(BeEmpty())
	})

	It("a reboot of an idle pool machine, silent past heartbeatTimeout and silenceGrace, does not get it replaced", func() {
		class := newClass()
		pool, ns := newPool(class.Name, 1, 1)
		agents := startGuests(ns)
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(1)), HaveField("Provisioning", int32(0))))
		before := machineUIDs(Default, ns)

		By("macOS reboots for an update: its instance stays Running, its agent is silent for minutes")
		agents.Pause()
		clock.Advance(macvirtv1alpha1.DefaultHeartbeatTimeout + 2*time.Minute)
		for name := range before {
			touch(types.NamespacedName{Namespace: ns, Name: name})
		}
		Eventually(everyGuestCondition(ns, HaveField("Reason", macvirtv1alpha1.ReasonHeartbeatStale))).WithTimeout(timeout).Should(Succeed())
		By("past silenceGrace after it was judged silent, well within bootTimeout since its last heartbeat")
		clock.Advance(2 * time.Minute)
		for name := range before {
			touch(types.NamespacedName{Namespace: ns, Name: name})
		}
		Consistently(func(g Gomega) map[string]types.UID { return machineUIDs(g, ns) }).WithTimeout(2 * time.Second).Should(Equal(before))

		By("macOS is back")
		agents.Resume()
		Eventually(poolStatus(pool.Name)).WithTimeout(timeout).Should(And(HaveField("Idle", int32(1)), HaveField("Unhealthy", int32(0))))
		Expect(machineUIDs(Default, ns)).To(Equal(before))
	})
})
