package controllers_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/internal/render"
)

// readyIdleMachines creates n machines of a pool, controlled by it as the
// pool controller makes them, that are already Ready (the machine
// controller is not running in these tests, so their status stays as
// written), each with the NetworkPolicy the machine controller would have
// made for it, letting nobody in (the exposure controller, which runs with
// the claim controller, opens it to the claim's namespace once bound).
func readyIdleMachines(pool *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass, n int) {
	ctx := context.Background()
	parallel(n, func(i int) {
		m := &macvirtv1alpha1.MacMachine{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool.Name, i), Namespace: pool.Spec.Namespace,
				Labels:          map[string]string{macvirtv1alpha1.LabelPool: pool.Name, macvirtv1alpha1.LabelClass: class.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, macvirtv1alpha1.GroupVersion.WithKind("MacPool"))}},
			Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, ClassRevision: render.ClassRevision(class)},
		}
		Expect(k8sClient.Create(ctx, m)).To(Succeed())
		m.Status.Phase = macvirtv1alpha1.MachineReady
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady,
			Status: metav1.ConditionTrue, Reason: macvirtv1alpha1.ReasonAsExpected, Message: "ready"})
		Expect(k8sClient.Status().Update(ctx, m)).To(Succeed())
		Expect(k8sClient.Create(ctx, render.NetworkPolicy(class, m, render.Exposure{}))).To(Succeed())
	})
}

// parallel runs f(0..n-1) on 10 goroutines.
func parallel(n int, f func(int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range 10 {
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// claimsFor creates n claims of a pool at once.
func claimsFor(pool string, n int) string {
	ns := newNamespace()
	parallel(n, func(i int) {
		newClaim(ns, func(c *macvirtv1alpha1.MacClaim) {
			c.GenerateName, c.Name, c.Spec.PoolName = "", fmt.Sprintf("c-%d", i), pool
		})
	})
	return ns
}

// expectOneToOne checks the binding in both directions: every claim is
// bound to exactly one machine whose claimRef names it, and every machine
// is bound to at most one claim, which names it back.
func expectOneToOne(claimNS, machineNS string, n int) {
	Eventually(func(g Gomega) {
		var claims macvirtv1alpha1.MacClaimList
		g.Expect(k8sClient.List(context.Background(), &claims, client.InNamespace(claimNS))).To(Succeed())
		g.Expect(claims.Items).To(HaveLen(n))
		machines := map[string]macvirtv1alpha1.MacMachine{}
		for _, m := range machinesIn(machineNS) {
			machines[m.Name] = m
		}
		owners := map[string]types.UID{}
		var free []string
		for _, m := range machines {
			if m.Spec.ClaimRef == nil {
				free = append(free, fmt.Sprintf("%s (phase %s, terminating %v, labels %v)", m.Name, m.Status.Phase, !m.DeletionTimestamp.IsZero(), m.Labels))
			}
		}
		for _, c := range claims.Items {
			g.Expect(c.Status.MachineRef).NotTo(BeNil(), "claim %s unbound: %v; machines not bound: %v", c.Name, c.Status.Conditions, free)
			g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionBound)).To(BeTrue(),
				"claim %s holds a reservation of %s, not a binding: %v", c.Name, c.Status.MachineRef.Name, c.Status.Conditions)
			m, ok := machines[c.Status.MachineRef.Name]
			g.Expect(ok).To(BeTrue(), "claim %s names missing machine %s", c.Name, c.Status.MachineRef.Name)
			g.Expect(m.Spec.ClaimRef).NotTo(BeNil())
			g.Expect(m.Spec.ClaimRef.UID).To(Equal(c.UID), "machine %s is bound to another claim than %s", m.Name, c.Name)
			g.Expect(owners).NotTo(HaveKey(m.Name), "machine %s bound to two claims", m.Name)
			owners[m.Name] = c.UID
		}
		for name, m := range machines {
			if m.Spec.ClaimRef != nil {
				g.Expect(owners).To(HaveKeyWithValue(name, m.Spec.ClaimRef.UID), "machine %s names a claim that does not name it", name)
			}
		}
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

func paused(p *macvirtv1alpha1.MacPool) { p.Spec.Paused = true }

func setPaused(p *macvirtv1alpha1.MacPool, v bool) {
	fresh := &macvirtv1alpha1.MacPool{}
	Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: p.Name}, fresh)).To(Succeed())
	before := fresh.DeepCopy()
	fresh.Spec.Paused = v
	Expect(k8sClient.Patch(context.Background(), fresh, client.MergeFrom(before))).To(Succeed())
}

// claimsOnly runs the claim controller and the machines' exposure
// controller (the machine's half of a binding's path to Ready), against
// hand-made machines.
var claimsOnly = func(o *operator.Options) {
	o.Controllers = []operator.Controller{operator.ClaimController, operator.ExposureController}
}

var _ = Describe("Binding", func() {
	const n = 100

	DescribeTable("a storm of 100 claims over 100 idle machines binds one to one",
		func(workers int) {
			DeferCleanup(startOperator(claimsOnly, func(o *operator.Options) { o.ClaimWorkers = workers }))
			class := newClass()
			pool, poolNS := newPool(class.Name, n, n, paused)
			readyIdleMachines(pool, class, n)
			claimNS := claimsFor(pool.Name, n)
			expectOneToOne(claimNS, poolNS, n)
		},
		Entry("with 1 worker", 1),
		Entry("with 4 workers", 4),
	)

	It("never hands a runner set's warm Macs to a claim by class or a stranger naming its pool, and hands them to the set's own claims", func() {
		DeferCleanup(startOperator(claimsOnly))
		// Not on demand: a claim with no idle Mac for it waits.
		class := newClass(func(c *macvirtv1alpha1.MacClass) { c.Spec.Tenancy.OnDemand = ptrTo(false) })
		ns := newNamespace()
		setPool, setNS := newPool(class.Name, 2, 2, paused, func(p *macvirtv1alpha1.MacPool) {
			p.Labels = map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios", macvirtv1alpha1.LabelRunnerSetNamespace: ns}
		})
		readyIdleMachines(setPool, class, 2)
		adminPool, adminNS := newPool(class.Name, 1, 1, paused)
		readyIdleMachines(adminPool, class, 1)
		byClass := func() *macvirtv1alpha1.MacClaim {
			return newClaim(ns, func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = class.Name })
		}
		first := byClass()
		Eventually(func() string {
			if ref := getClaim(key(first)).Status.MachineRef; ref != nil {
				return ref.Namespace
			}
			return ""
		}).WithTimeout(timeout).Should(Equal(adminNS), "the class's claim takes the admin's pool's Mac")
		second := byClass()
		Eventually(func() string {
			for _, c := range getClaim(key(second)).Status.Conditions {
				if c.Reason == macvirtv1alpha1.ReasonWaitingForMachine {
					return c.Message
				}
			}
			return ""
		}).WithTimeout(timeout).Should(ContainSubstring("no idle machine in class/"+class.Name),
			"with only the set's warm Macs idle, a claim by class waits")
		for _, m := range machinesIn(setNS) {
			Expect(m.Spec.ClaimRef).To(BeNil(), "the set's warm Mac %s was handed to a claim by class", m.Name)
		}
		runnerOfIOS := func(c *macvirtv1alpha1.MacClaim) {
			c.Spec.PoolName, c.Labels = setPool.Name, map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios"}
		}
		stranger := newClaim(newNamespace(), runnerOfIOS)
		Eventually(func() string {
			for _, c := range getClaim(key(stranger)).Status.Conditions {
				if c.Reason == macvirtv1alpha1.ReasonWaitingForMachine {
					return c.Message
				}
			}
			return ""
		}).WithTimeout(timeout).Should(ContainSubstring("keeps warm Macs for MacRunnerSet " + ns + "/ios, and only its runners take them"))
		Consistently(func() *macvirtv1alpha1.ObjectRef { return getClaim(key(stranger)).Status.MachineRef }).
			WithTimeout(3*time.Second).Should(BeNil(), "a claim of another namespace naming the set's pool, with the set's label, waits")
		own := newClaim(ns, runnerOfIOS)
		Eventually(func() string {
			if ref := getClaim(key(own)).Status.MachineRef; ref != nil {
				return ref.Namespace
			}
			return ""
		}).WithTimeout(timeout).Should(Equal(setNS), "the set's own claim takes its warm Mac")
	})

	It("stays one to one with two operators running at once and a client that conflicts and lists stale", func() {
		var clients []*faultyClient
		for range 2 {
			DeferCleanup(startOperator(func(o *operator.Options) {
				o.Controllers = []operator.Controller{operator.ClaimController, operator.PoolController}
				o.WrapClient = func(c client.Client) client.Client {
					f := newFaultyClient(c)
					f.conflictEvery, f.staleLists = 3, 50
					clients = append(clients, f)
					return f
				}
			}))
		}
		// The claim's status no longer reserves a machine before its bind:
		// two operators whose caches disagree (these lists are stale, these
		// updates conflict) can each bind one for a claim, and the one the
		// status does not name is deleted (burnt). Both try the same machine
		// first, and a worker waits for a machine another is binding, so
		// that is rare; a few spare machines keep a burn from starving a
		// claim here (the pool's replacement would never turn Ready, no
		// machine controller runs). Whatever happens, no claim holds two
		// machines, and every burnt machine is said.
		const spare = 10
		class := newClass()
		pool, poolNS := newPool(class.Name, n+spare, n+spare, paused)
		readyIdleMachines(pool, class, n+spare)
		setPaused(pool, false)
		claimNS := claimsFor(pool.Name, n)
		expectOneToOne(claimNS, poolNS, n)
		Expect(clients[0].updates.Load()+clients[1].updates.Load()).To(BeNumerically(">=", n), "both operators were binding")
		burnt := clients[0].deletesIn(poolNS) + clients[1].deletesIn(poolNS)
		AddReportEntry("machines burnt by two operators at once (target 0)", burnt)
		_, _ = fmt.Fprintf(GinkgoWriter, "machines burnt by two operators at once: %d (target 0)\n", burnt)
		if burnt > 0 {
			Eventually(func() []eventsv1.Event { return warningsIn(claimNS, "OrphanDeleted") }).WithTimeout(timeout).
				ShouldNot(BeEmpty(), "a burnt machine is a Warning on its claim")
		}
		Expect(burnt).To(BeNumerically("<", spare))

		By("never exceeding maxMachines while both operators fill a pool with a stale view")
		capped, cappedNS := newPool(class.Name, 6, 6, func(p *macvirtv1alpha1.MacPool) { p.Spec.MaxProvisioning = 6 })
		Consistently(func(g Gomega) int { return len(machinesInWith(g, cappedNS)) }).WithTimeout(3 * time.Second).Should(BeNumerically("<=", 6))
		Eventually(func(g Gomega) int { return len(machinesInWith(g, cappedNS)) }).WithTimeout(timeout).Should(Equal(6))
		Expect(poolStatus(capped.Name)().Machines).To(BeNumerically("<=", 6))
	})
})
