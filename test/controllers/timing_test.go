package controllers_test

import (
	"context"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

var _ = Describe("Provisioning progress", func() {
	It("writes a machine's status about once per 10 % of its import, not on every progress tick CDI reports", func() {
		DeferCleanup(startOperator())
		ns := newNamespace()
		class := newClass()
		// A system disk whose import reports 100 progress ticks, like a real
		// import of minutes read every 2 s; the bootloader disk takes 4.
		sim.SetImportSteps(ns, "slow-system", 100)
		DeferCleanup(sim.SetImportSteps, ns, "slow-system", 0)

		w, err := watchClient().Watch(context.Background(), &macvirtv1alpha1.MacMachineList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(w.Stop)
		k := key(newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", "slow" }))
		DeferCleanup(deleteAndWait, k)

		var last *macvirtv1alpha1.MacMachineStatus
		writes, progress := 0, map[string]bool{}
		deadline := time.After(2 * timeout)
	watching:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				Expect(ok).To(BeTrue(), "the watch ended")
				m, isMachine := ev.Object.(*macvirtv1alpha1.MacMachine)
				if !isMachine || ev.Type != watch.Modified || m.Name != k.Name {
					continue
				}
				if last != nil && equality.Semantic.DeepEqual(*last, m.Status) {
					continue // a write of metadata or spec
				}
				last = m.Status.DeepCopy()
				if m.Status.Phase == macvirtv1alpha1.MachineProvisioning {
					writes++
					Expect(m.Status.Provisioning).NotTo(BeNil())
					progress[m.Status.Provisioning.Progress] = true
				}
				if m.Status.Phase == macvirtv1alpha1.MachineStarting || m.Status.Phase == macvirtv1alpha1.MachineBooting {
					break watching
				}
				Expect(m.Status.Phase).NotTo(Equal(macvirtv1alpha1.MachineFailed))
			case <-deadline:
				Fail("the machine did not get past Provisioning")
			}
		}
		// Ten 10 % steps, one write per DataVolume phase change (Pending,
		// scheduled, in progress, Succeeded) of two disks, and a few for the
		// VirtualMachine's own status: about 20 at most, against one per
		// progress tick (over 100) when the machine copied CDI's progress.
		By("the import's 104 progress ticks made few status writes")
		Expect(writes).To(BeNumerically("<=", 25),
			"%d status writes while Provisioning, %d distinct progress values: CDI's progress ticks rewrite the machine", writes, len(progress))
		Expect(progress).To(HaveKey("50%"), "progress moves in 10 % steps")
	})

	It("keeps a machine's last known progress while CDI reports N/A in the middle of an import", func() {
		DeferCleanup(startOperator())
		ns := newNamespace()
		class := newClass()
		sim.SetImportSteps(ns, "blind-system", 20)
		DeferCleanup(sim.SetImportSteps, ns, "blind-system", 0)
		k := key(newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", "blind" }))
		DeferCleanup(deleteAndWait, k)
		progress := func() string {
			m := getMachine(k)
			if m.Status.Provisioning == nil {
				return ""
			}
			return m.Status.Provisioning.Progress
		}
		percent := func() float64 {
			f, _ := strconv.ParseFloat(strings.TrimSuffix(progress(), "%"), 64)
			return f
		}
		Eventually(percent).WithTimeout(timeout).WithPolling(10 * time.Millisecond).Should(BeNumerically(">=", 30))
		fault := simulator.Fault{Kind: simulator.DataVolumeProgressUnknown, Namespace: ns, Name: "blind-system"}
		sim.Inject(fault)
		dv := &cdiv1.DataVolume{}
		Eventually(func(g Gomega) cdiv1.DataVolumeProgress {
			g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "blind-system"}, dv)).To(Succeed())
			return dv.Status.Progress
		}).WithTimeout(timeout).Should(Equal(cdiv1.DataVolumeProgress("N/A")))
		known := progress()
		Expect(percent()).To(BeNumerically(">=", 30), "CDI's N/A sent the machine's progress back to %q", known)
		Consistently(progress).WithTimeout(time.Second).Should(Equal(known), "N/A from CDI is not 0 %")

		sim.Clear(fault)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
	})
})
