package images_test

import (
	"context"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

const (
	imageURL = "docker://registry.example.com/macos/sonoma:14"
	digestA  = "sha256:aaaaaaaaaaaa1111111111111111111111111111111111111111111111111111"
	digestB  = "sha256:bbbbbbbbbbbb2222222222222222222222222222222222222222222222222222"
	digestC  = "sha256:cccccccccccc3333333333333333333333333333333333333333333333333333"
)

var _ = Describe("A class refreshed from a registry", func() {
	It("follows a new digest: its pool rolls its idle Macs, never touches a bound one, and never has fewer Ready idle Macs than idle", func() {
		registry.SetDigest(imageURL, digestA)
		sample := &macvirtv1alpha1.MacClass{}
		Expect(admin.Get(ctx, types.NamespacedName{Name: "sonoma"}, sample)).To(Succeed())
		class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "sonoma-nightly"}, Spec: *sample.Spec.DeepCopy()}
		class.Spec.Image.SourceRef = nil
		class.Spec.Image.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To(imageURL)}}
		class.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 0 1 1 *", ImportsToKeep: ptr.To[int32](2)}
		Expect(admin.Create(ctx, class)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, class) })

		By("the first import: the class resolves it and is Ready")
		var first string
		Eventually(func(g Gomega) {
			c := getClass(g, class.Name)
			g.Expect(c.Status.Image).NotTo(BeNil())
			g.Expect(c.Status.Image.Digest).To(Equal(digestA))
			g.Expect(c.Status.Image.Resolved).NotTo(BeNil())
			g.Expect(c.Status.Image.Resolved.Name).To(ContainSubstring("aaaaaaaaaaaa"))
			g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, macvirtv1alpha1.ConditionReady)).To(BeTrue(), "%+v", c.Status.Conditions)
			first = c.Status.Revision
		}).Should(Succeed())

		By("a pool of 3 idle Macs, and one of its Macs bound to a claim")
		pool := &macvirtv1alpha1.MacPool{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: macvirtv1alpha1.MacPoolSpec{
			ClassName: class.Name, Namespace: "macvirt-pools", Idle: ptr.To[int32](3), MaxMachines: ptr.To[int32](6), MaxProvisioning: 2}}
		Expect(admin.Create(ctx, pool)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, pool) })
		ns := namespace("nightly")
		claim := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "build"},
			Spec: macvirtv1alpha1.MacClaimSpec{ClassName: class.Name, PoolName: pool.Name}}
		Expect(admin.Create(ctx, claim)).To(Succeed())
		bound := readyMachineOf(claim)
		Expect(bound.Spec.ClassRevision).To(Equal(first))
		Eventually(func() []string { return readyIdle(pool.Name, first) }).Should(HaveLen(3))

		By("watching the pool's Macs from now on")
		w := watchPool(pool.Name, bound)
		DeferCleanup(w.stop)

		By("a new build of the image: the class follows its digest")
		registry.SetDigest(imageURL, digestB)
		system.Simulator.PollDataImportCron("macvirt-images", class.Name+"-image")
		var second string
		Eventually(func(g Gomega) {
			c := getClass(g, class.Name)
			g.Expect(c.Status.Image.Digest).To(Equal(digestB))
			g.Expect(c.Status.Image.Resolved.Name).To(ContainSubstring("bbbbbbbbbbbb"))
			g.Expect(c.Status.Revision).NotTo(Equal(first))
			second = c.Status.Revision
		}).Should(Succeed())
		showRoll(pool.Name)

		By("the pool rolls its idle Macs to it")
		rolled := func(g Gomega) {
			g.Expect(readyIdle(pool.Name, second)).To(HaveLen(3))
			g.Expect(readyIdle(pool.Name, first)).To(BeEmpty())
		}
		for i := 0; i < 3; i++ {
			if InterceptGomegaFailures(func() { rolled(Default) }) == nil {
				break
			}
			showRoll(pool.Name)
			Eventually(func() int { return len(readyIdle(pool.Name, second)) }).Should(BeNumerically(">", i))
		}
		Eventually(rolled).Should(Succeed())
		showRoll(pool.Name)
		w.stop()
		minimum, boundTouched, events := w.result()
		Expect(events).To(BeNumerically(">", 0))
		Expect(minimum).To(BeNumerically(">=", 3), "the pool had fewer Ready idle Macs than idle during the roll")
		Expect(boundTouched).To(BeEmpty(), "the bound Mac was touched")
		now := getMachine(key(bound))
		Expect(now.UID).To(Equal(bound.UID))
		Expect(now.Spec.ClassRevision).To(Equal(first), "the bound Mac keeps its disk and revision")
		Expect(now.Status.Phase).To(Equal(macvirtv1alpha1.MachineReady))

		By("old imports are garbage-collected as importsToKeep says")
		registry.SetDigest(imageURL, digestC)
		system.Simulator.PollDataImportCron("macvirt-images", class.Name+"-image")
		Eventually(func(g Gomega) {
			var dvs cdiv1.DataVolumeList
			g.Expect(admin.List(ctx, &dvs, client.InNamespace("macvirt-images"))).To(Succeed())
			var imports []string
			for _, dv := range dvs.Items {
				if strings.HasPrefix(dv.Name, class.Name+"-image-") {
					imports = append(imports, dv.Name)
				}
			}
			g.Expect(imports).To(HaveLen(2))
			g.Expect(strings.Join(imports, ",")).NotTo(ContainSubstring("aaaaaaaaaaaa"))
		}).Should(Succeed())
	})
})

func getClass(g Gomega, name string) *macvirtv1alpha1.MacClass {
	c := &macvirtv1alpha1.MacClass{}
	g.Expect(admin.Get(ctx, types.NamespacedName{Name: name}, c)).To(Succeed())
	return c
}

// readyIdle lists the pool's Ready unbound Macs of a revision.
func readyIdle(pool, revision string) []string {
	var list macvirtv1alpha1.MacMachineList
	Expect(admin.List(ctx, &list, client.InNamespace("macvirt-pools"), client.MatchingLabels{macvirtv1alpha1.LabelPool: pool})).To(Succeed())
	var out []string
	for i := range list.Items {
		m := &list.Items[i]
		if isReadyIdle(m) && m.Spec.ClassRevision == revision {
			out = append(out, m.Name)
		}
	}
	return out
}

func isReadyIdle(m *macvirtv1alpha1.MacMachine) bool {
	return m.Spec.ClaimRef == nil && m.DeletionTimestamp == nil && m.Status.Phase == macvirtv1alpha1.MachineReady
}

// poolWatch follows a pool's Macs through a watch: the fewest Ready idle
// Macs seen at any moment, and every change to the bound Mac.
type poolWatch struct {
	mu       sync.Mutex
	machines map[string]*macvirtv1alpha1.MacMachine
	minimum  int
	touched  []string
	events   int
	cancel   context.CancelFunc
	done     chan struct{}
}

func watchPool(pool string, bound *macvirtv1alpha1.MacMachine) *poolWatch {
	wc := world.Admin
	var list macvirtv1alpha1.MacMachineList
	Expect(admin.List(ctx, &list, client.InNamespace("macvirt-pools"), client.MatchingLabels{macvirtv1alpha1.LabelPool: pool})).To(Succeed())
	w := &poolWatch{machines: map[string]*macvirtv1alpha1.MacMachine{}, done: make(chan struct{})}
	for i := range list.Items {
		w.machines[list.Items[i].Name] = &list.Items[i]
	}
	w.minimum = w.readyIdle()
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	iface, err := wc.Watch(wctx, &macvirtv1alpha1.MacMachineList{}, client.InNamespace("macvirt-pools"),
		client.MatchingLabels{macvirtv1alpha1.LabelPool: pool}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer GinkgoRecover()
		defer close(w.done)
		defer iface.Stop()
		for ev := range iface.ResultChan() {
			m, ok := ev.Object.(*macvirtv1alpha1.MacMachine)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.events++
			if m.UID == bound.UID {
				switch {
				case ev.Type == watch.Deleted || m.DeletionTimestamp != nil:
					w.touched = append(w.touched, "deleted")
				case m.Spec.ClassRevision != bound.Spec.ClassRevision:
					w.touched = append(w.touched, "revision "+m.Spec.ClassRevision)
				case m.Spec.Running != nil && !*m.Spec.Running:
					w.touched = append(w.touched, "stopped")
				case m.Spec.ClaimRef == nil:
					w.touched = append(w.touched, "unbound")
				}
			}
			if ev.Type == watch.Deleted {
				delete(w.machines, m.Name)
			} else {
				w.machines[m.Name] = m
			}
			if n := w.readyIdle(); n < w.minimum {
				w.minimum = n
				GinkgoWriter.Printf("Ready idle Macs fell to %d at %s of %s\n", n, ev.Type, m.Name)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *poolWatch) readyIdle() int {
	n := 0
	for _, m := range w.machines {
		if isReadyIdle(m) {
			n++
		}
	}
	return n
}

func (w *poolWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *poolWatch) result() (minimum int, touched []string, events int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.minimum, append([]string(nil), w.touched...), w.events
}

// showRoll pictures the roll for a person reading the log.
func showRoll(pool string) {
	showKubectl("macimage,macclass,macpool", "-o", "wide")
	showKubectl("macmachines", "-n", "macvirt-pools", "-l", macvirtv1alpha1.LabelPool+"="+pool,
		"-o", "custom-columns=NAME:.metadata.name,REVISION:.spec.classRevision,PHASE:.status.phase,CLAIM:.spec.claimRef.name,DELETING:.metadata.deletionTimestamp")
}
