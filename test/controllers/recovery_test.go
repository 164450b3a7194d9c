package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// Each entry stops the operator right after one observable step and starts
// a fresh one, which must converge with no duplicate or orphaned objects.
var _ = Describe("A restarted operator", func() {
	var ns, class string
	BeforeEach(func() {
		ns = newNamespace()
		class = newClass().Name
	})

	machineHas := func(check func(*macvirtv1alpha1.MacMachine, owned) bool) func(types.NamespacedName) bool {
		return func(k types.NamespacedName) bool {
			m := &macvirtv1alpha1.MacMachine{}
			if err := k8sClient.Get(context.Background(), k, m); err != nil {
				return false
			}
			return check(m, ownedBy(k)(Default))
		}
	}

	DescribeTable("finishes provisioning after a restart",
		func(step func(types.NamespacedName) bool) {
			stop := startOperator()
			k := key(newMachine(ns, class))
			Eventually(func() bool { return step(k) }).WithTimeout(timeout).WithPolling(5 * time.Millisecond).Should(BeTrue())
			stop()
			DeferCleanup(startOperator())
			DeferCleanup(deleteAndWait, k)
			Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
			Consistently(ownedBy(k)).WithTimeout(500 * time.Millisecond).Should(Equal(owned{VMs: 1, VMIs: 1, DataVolumes: 2}))
			Expect(getMachine(k).Finalizers).To(HaveLen(1))
		},
		Entry("after the finalizer is added", machineHas(func(m *macvirtv1alpha1.MacMachine, _ owned) bool {
			return len(m.Finalizers) > 0
		})),
		Entry("after the identity is recorded", machineHas(func(m *macvirtv1alpha1.MacMachine, _ owned) bool {
			return m.Spec.SMBIOS != nil
		})),
		Entry("after the first DataVolume exists", machineHas(func(_ *macvirtv1alpha1.MacMachine, o owned) bool {
			return o.DataVolumes > 0
		})),
		Entry("after the VirtualMachine exists", machineHas(func(_ *macvirtv1alpha1.MacMachine, o owned) bool {
			return o.VMs > 0
		})),
		Entry("while provisioning", machineHas(func(m *macvirtv1alpha1.MacMachine, _ owned) bool {
			return m.Status.Phase == macvirtv1alpha1.MachineProvisioning
		})),
		Entry("after the VMI exists", machineHas(func(_ *macvirtv1alpha1.MacMachine, o owned) bool {
			return o.VMIs > 0
		})),
	)

	DescribeTable("finishes a graceful deletion after a restart",
		func(step func(types.NamespacedName) bool) {
			stop := startOperator()
			k := key(newMachine(ns, class))
			Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
			Expect(k8sClient.Delete(context.Background(), getMachine(k))).To(Succeed())
			Eventually(func() bool { return step(k) }).WithTimeout(timeout).WithPolling(5 * time.Millisecond).Should(BeTrue())
			stop()
			DeferCleanup(startOperator())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(context.Background(), k, &macvirtv1alpha1.MacMachine{}))
			}).WithTimeout(timeout).Should(BeTrue())
			Expect(ownedBy(k)(Default)).To(Equal(owned{}))
			// A stop call cut off by the first operator's shutdown may reach
			// the stand-in without taking effect, so the second operator asks
			// again; every request must still be a graceful stop.
			Expect(stopRequestsFor(k)).To(And(Not(BeEmpty()),
				HaveEach(HaveField("GracePeriod", HaveValue(Equal(int64(300)))))), "only graceful stops with the class grace period")
		},
		Entry("right after the deletion request", func(types.NamespacedName) bool { return true }),
		Entry("after the stop request", func(k types.NamespacedName) bool {
			vm := vmOf(k)()
			return vm != nil && vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted
		}),
		Entry("after the VMI is gone", machineHas(func(_ *macvirtv1alpha1.MacMachine, o owned) bool {
			return o.VMIs == 0
		})),
	)
})
