package controller_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/internal/simulator"
)

var _ = Describe("MacClass status", func() {
	BeforeEach(func() { DeferCleanup(startOperator()) })

	It("records the revision and names a missing DataSource until it exists", func() {
		ns := newNamespace()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef.Namespace = &ns
			c.Spec.Bootloader.SourceRef.Namespace = &ns
		})
		get := func() macvirtv1alpha1.MacClassStatus {
			c := &macvirtv1alpha1.MacClass{}
			Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: class.Name}, c)).To(Succeed())
			return c.Status
		}
		Eventually(get).WithTimeout(timeout).Should(And(
			HaveField("Revision", HaveLen(10)),
			HaveField("Conditions", ContainElement(And(HaveField("Status", metav1.ConditionFalse),
				HaveField("Message", And(ContainSubstring("DataSource "+ns+"/sonoma"), ContainSubstring("DataSource "+ns+"/opencore")))))),
		))
		goldenImages(ns, "sonoma", "opencore")
		Eventually(get).WithTimeout(timeout).Should(HaveField("Conditions", ContainElement(HaveField("Status", metav1.ConditionTrue))))
	})
})

var _ = Describe("A pool", func() {
	It("with VMs stuck Pending neither storms nor exceeds its cap", func() {
		DeferCleanup(startOperator())
		class := newClass()
		name := "stuck-" + newNamespace()
		ns := newNamespace()
		for i := range 3 {
			f := simulator.Fault{Kind: simulator.Unschedulable, Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i)}
			sim.Inject(f)
			DeferCleanup(sim.Clear, f)
		}
		w, err := watchClient().Watch(context.Background(), &macvirtv1alpha1.MacMachineList{}, client.InNamespace(ns))
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		idle, maxM := int32(2), int32(3)
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: macvirtv1alpha1.MacPoolSpec{ClassName: class.Name, Namespace: ns, Idle: &idle, MaxMachines: &maxM}}
		Expect(k8sClient.Create(context.Background(), pool)).To(Succeed())
		DeferCleanup(func() { _ = k8sClient.Delete(context.Background(), pool) })

		Eventually(poolStatus(name)).WithTimeout(timeout).Should(HaveField("Provisioning", int32(2)))
		added, deleted := 0, 0
		deadline := time.After(5 * time.Second)
	count:
		for {
			select {
			case ev := <-w.ResultChan():
				switch ev.Type {
				case watch.Added:
					added++
				case watch.Deleted:
					deleted++
				}
			case <-deadline:
				break count
			}
		}
		Expect(added).To(Equal(2), "machines created while VMs cannot be scheduled")
		Expect(deleted).To(BeZero())
		Expect(len(machinesIn(ns))).To(BeNumerically("<=", int(maxM)))
		Eventually(conditionOf(types.NamespacedName{Namespace: ns, Name: name + "-0"}, macvirtv1alpha1.ConditionReady)).
			WithTimeout(timeout).Should(HaveField("Reason", macvirtv1alpha1.ReasonUnschedulable))
		Expect(machinesIn(ns)).To(HaveLen(2), "still no machine beyond the two stuck ones")
	})

	It("converges after a crash in the middle of a scale-up, with no duplicates", func() {
		class := newClass()
		var faulty *faultyClient
		stop := startOperator(func(o *operator.Options) {
			o.Controllers = []operator.Controller{operator.PoolController}
			o.WrapClient = func(c client.Client) client.Client {
				faulty = newFaultyClient(c)
				faulty.crashAfter = 1
				// This spec's pool and its machines (named <pool>-<slot>) only.
				faulty.scope = func(o client.Object) bool { return strings.HasPrefix(o.GetName(), "crash-pool-") }
				return faulty
			}
		})
		pool, ns := newPool(class.Name, 3, 5, func(p *macvirtv1alpha1.MacPool) {
			p.GenerateName, p.Spec.MaxProvisioning = "crash-pool-", 3
		})
		Eventually(faulty.crashed).WithTimeout(timeout).Should(BeClosed())
		stop()
		Expect(machinesIn(ns)).To(HaveLen(1), "the crash came after the first create")
		DeferCleanup(startOperator(func(o *operator.Options) { o.Controllers = []operator.Controller{operator.PoolController} }))
		Eventually(func(g Gomega) []string {
			var names []string
			for _, m := range machinesInWith(g, ns) {
				names = append(names, m.Name)
			}
			return names
		}).WithTimeout(timeout).Should(ConsistOf(pool.Name+"-0", pool.Name+"-1", pool.Name+"-2"))
		Consistently(func(g Gomega) int { return len(machinesInWith(g, ns)) }).WithTimeout(time.Second).Should(Equal(3))
	})
})

var _ = Describe("A bind", func() {
	It("interrupted between the machine write and the claim write is completed, not undone", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 5, 5, paused)
		readyIdleMachines(pool, class, 5)
		claimNS := newNamespace()
		var faulty *faultyClient
		stop := startOperator(func(o *operator.Options) {
			o.Controllers = []operator.Controller{operator.ClaimController}
			o.WrapClient = func(c client.Client) client.Client {
				faulty = newFaultyClient(c)
				faulty.crashAfter = 1
				faulty.scope = func(o client.Object) bool { return o.GetNamespace() == claimNS || o.GetNamespace() == poolNS }
				return faulty
			}
		})
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		Eventually(faulty.crashed).WithTimeout(timeout).Should(BeClosed())
		stop()
		var bound []string
		for _, m := range machinesIn(poolNS) {
			if m.Spec.ClaimRef != nil {
				bound = append(bound, m.Name)
			}
		}
		Expect(bound).To(HaveLen(1), "the machine side was written before the crash")
		Expect(getClaim(key(claim)).Status.MachineRef).To(BeNil(), "the claim side was not")

		DeferCleanup(startOperator(claimsOnly))
		Eventually(func(g Gomega) string {
			if ref := getClaimWith(g, key(claim)).Status.MachineRef; ref != nil {
				return ref.Name
			}
			return ""
		}).WithTimeout(timeout).Should(Equal(bound[0]))
		expectOneToOne(claim.Namespace, poolNS, 1)
	})
})
