package controllers_test

import (
	"context"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/argocdhealth"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// What kstatus-based tools (Flux, kpt, cli-utils' wait) and Argo CD, with
// the health checks in config/argocd, report for an object, as one string.
const (
	current    = "Current/Healthy"
	inProgress = "InProgress/Progressing"
	failed     = "Failed/Degraded"
)

func computeKstatus(obj client.Object) string {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	Expect(err).NotTo(HaveOccurred())
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	res, err := status.Compute(u)
	Expect(err).NotTo(HaveOccurred())
	// Argo CD sees the object as JSON: round-trip it so numbers are float64.
	data, err := json.Marshal(u.Object)
	Expect(err).NotTo(HaveOccurred())
	var obj2 map[string]any
	Expect(json.Unmarshal(data, &obj2)).To(Succeed())
	script, err := argocdhealth.Script()
	Expect(err).NotTo(HaveOccurred())
	health, _, err := argocdhealth.Run(script, obj2)
	Expect(err).NotTo(HaveOccurred())
	return string(res.Status) + "/" + health
}

// kstatusOf reads the object afresh and computes its kstatus and health.
func kstatusOf[T client.Object](k types.NamespacedName, obj T) func() string {
	return func() string {
		if err := k8sClient.Get(context.Background(), k, obj); err != nil {
			return err.Error()
		}
		return computeKstatus(obj)
	}
}

var _ = Describe("kstatus and Argo CD health of objects the controllers wrote", func() {
	BeforeEach(func() {
		DeferCleanup(startOperator())
		DeferCleanup(clock.Reset)
	})

	It("MacClass: Failed while a DataSource is missing, Current once both exist, InProgress right after a change", func() {
		ns := newNamespace()
		class := newClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.SourceRef.Namespace, c.Spec.Bootloader.SourceRef.Namespace = &ns, &ns
		})
		k := key(class)
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacClass{})).WithTimeout(timeout).Should(Equal(failed))

		goldenImages(ns, "sonoma", "opencore")
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacClass{})).WithTimeout(timeout).Should(Equal(current))

		c := &macvirtv1alpha1.MacClass{}
		Expect(k8sClient.Get(context.Background(), k, c)).To(Succeed())
		c.Spec.Description = "changed"
		Expect(k8sClient.Update(context.Background(), c)).To(Succeed())
		// The update's response: a new generation the controller has not seen.
		Expect(computeKstatus(c)).To(Equal(inProgress))
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacClass{})).WithTimeout(timeout).Should(Equal(current))
	})

	It("MacPool: Failed without its class, InProgress while machines provision, Current once the idle target is met", func() {
		className := "later-" + newNamespace()
		pool, ns := newPool(className, 1, 1)
		k := types.NamespacedName{Name: pool.Name}
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacPool{})).WithTimeout(timeout).Should(Equal(failed))
		Expect(poolCondition(pool.Name, macvirtv1alpha1.ConditionStalled)).To(HaveField("Reason", macvirtv1alpha1.ReasonClassNotFound))

		newClass(func(c *macvirtv1alpha1.MacClass) { c.GenerateName, c.Name = "", className })
		Eventually(func(g Gomega) []macvirtv1alpha1.MacMachine { return machinesInWith(g, ns) }).WithTimeout(timeout).Should(HaveLen(1))
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacPool{})).WithTimeout(timeout).Should(Equal(inProgress))
		startGuests(ns)
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacPool{})).WithTimeout(timeout).Should(Equal(current))
	})

	It("MacClaim: InProgress until its machine is Ready, Current then, Failed once the machine is lost", func() {
		class := newClass()
		pool, poolNS := newPool(class.Name, 1, 2)
		claimNS := newNamespace()
		claim := newClaim(claimNS, func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = pool.Name })
		k := key(claim)
		Eventually(claimCondition(k, macvirtv1alpha1.ConditionReady)).WithTimeout(timeout).Should(HaveField("Status", metav1.ConditionFalse))
		Expect(kstatusOf(k, &macvirtv1alpha1.MacClaim{})()).To(Equal(inProgress))

		startGuests(poolNS)
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacClaim{})).WithTimeout(timeout).Should(Equal(current))

		ref := getClaim(k).Status.MachineRef
		Expect(k8sClient.Delete(context.Background(), getMachine(types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}))).To(Succeed())
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacClaim{})).WithTimeout(timeout).Should(Equal(failed))
		Expect(claimCondition(k, macvirtv1alpha1.ConditionStalled)()).To(HaveField("Reason", macvirtv1alpha1.ReasonMachineLost))
	})

	It("MacMachine: InProgress while booting, Current when Ready, Failed when a DataVolume fails", func() {
		ns := newNamespace()
		class := newClass()
		k := key(newMachine(ns, class.Name))
		DeferCleanup(deleteAndWait, k)
		Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
		Expect(kstatusOf(k, &macvirtv1alpha1.MacMachine{})()).To(Equal(inProgress))
		heartbeat(k)
		Eventually(kstatusOf(k, &macvirtv1alpha1.MacMachine{})).WithTimeout(timeout).Should(Equal(current))

		sim.Inject(simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: ns, Name: "broken-system"})
		broken := newMachine(ns, class.Name, func(m *macvirtv1alpha1.MacMachine) { m.GenerateName, m.Name = "", "broken" })
		DeferCleanup(deleteAndWait, key(broken))
		Eventually(kstatusOf(key(broken), &macvirtv1alpha1.MacMachine{})).WithTimeout(timeout).Should(Equal(failed))
	})
})

func poolCondition(name, t string) metav1.Condition {
	return pollCondition(types.NamespacedName{Name: name}, t, &macvirtv1alpha1.MacPool{}, func(p *macvirtv1alpha1.MacPool) []metav1.Condition {
		return p.Status.Conditions
	})()
}
