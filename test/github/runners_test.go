package github_test

import (
	"fmt"
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// runnerSet creates a runner set in ns for the organisation acme on the
// fake GitHub: the sample class, at most five runners, two warm Macs.
func runnerSet(ns, name string, mutate ...func(*macvirtv1alpha1.MacRunnerSet)) *macvirtv1alpha1.MacRunnerSet {
	s := &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: macvirtv1alpha1.MacRunnerSetSpec{
			GitHub:    macvirtv1alpha1.GitHubRunnerTarget{URL: gh.URL() + "/acme", CredentialsSecretName: "github"},
			ClassName: ciClass, MaxRunners: 5, MinIdle: 2,
			JobTimeout:          &metav1.Duration{Duration: 10 * time.Minute},
			RegistrationTimeout: &metav1.Duration{Duration: 2 * time.Minute},
		}}
	for _, m := range mutate {
		m(s)
	}
	Expect(admin.Create(ctx, s)).To(Succeed())
	return s
}

// claimWatch follows a set's claims and the machines bound to them from
// watches: the most claims that existed at once (being deleted included),
// and, by machine UID (pools reuse names), every claim each machine served.
type claimWatch struct {
	mu   sync.Mutex
	live map[string]bool
	// active are the live claims not being released: runners that may
	// take a job, which maxRunners bounds.
	active         map[string]bool
	max, maxActive int
	served         map[types.UID]map[string]bool // machine -> claims of the namespace
	claims         map[string]bool
}

func watchClaims(ns, set string) *claimWatch {
	w, err := world.Admin.Watch(ctx, &macvirtv1alpha1.MacClaimList{}, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelRunnerSet: set})
	Expect(err).NotTo(HaveOccurred())
	mw, err := world.Admin.Watch(ctx, &macvirtv1alpha1.MacMachineList{})
	Expect(err).NotTo(HaveOccurred())
	cw := &claimWatch{live: map[string]bool{}, active: map[string]bool{}, served: map[types.UID]map[string]bool{}, claims: map[string]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*macvirtv1alpha1.MacClaim)
			if !ok {
				continue
			}
			cw.mu.Lock()
			switch ev.Type {
			case watch.Added, watch.Modified:
				cw.live[c.Name], cw.claims[c.Name] = true, true
				if c.DeletionTimestamp.IsZero() {
					cw.active[c.Name] = true
				} else {
					delete(cw.active, c.Name)
				}
			case watch.Deleted:
				delete(cw.live, c.Name)
				delete(cw.active, c.Name)
			}
			cw.max, cw.maxActive = max(cw.max, len(cw.live)), max(cw.maxActive, len(cw.active))
			cw.mu.Unlock()
		}
	}()
	go func() {
		for ev := range mw.ResultChan() {
			m, ok := ev.Object.(*macvirtv1alpha1.MacMachine)
			if !ok || m.Spec.ClaimRef == nil || m.Spec.ClaimRef.Namespace != ns {
				continue
			}
			cw.mu.Lock()
			if cw.served[m.UID] == nil {
				cw.served[m.UID] = map[string]bool{}
			}
			cw.served[m.UID][m.Spec.ClaimRef.Name] = true
			cw.mu.Unlock()
		}
	}()
	DeferCleanup(w.Stop)
	DeferCleanup(mw.Stop)
	return cw
}

// peakActive is the most claims at once that were not being released.
func (cw *claimWatch) peakActive() int {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.maxActive
}

// peak is the most claims at once (those being released included), the
// machines that served two claims, and how many claims and machines were
// seen.
func (cw *claimWatch) peak() (int, []string, int, int) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	var reused []string
	for uid, claims := range cw.served {
		if len(claims) > 1 {
			reused = append(reused, fmt.Sprintf("%s served %v", uid, claims))
		}
	}
	return cw.max, reused, len(cw.claims), len(cw.served)
}

// queue queues n jobs for the scale set named label, each running d.
func queue(label string, n int, d time.Duration) []string {
	ids := make([]string, 0, n)
	for i := range n {
		ids = append(ids, gh.QueueJob(fakegithub.Job{Owner: "acme", Repo: "ios-app", Labels: []string{label},
			DisplayName: fmt.Sprintf("build-%d", i+1), Duration: d}))
	}
	return ids
}

func jobsOf(ids []string) []fakegithub.JobView {
	var out []fakegithub.JobView
	for _, id := range ids {
		j, ok := gh.Job(id)
		Expect(ok).To(BeTrue())
		out = append(out, j)
	}
	return out
}

func getSet(s *macvirtv1alpha1.MacRunnerSet) *macvirtv1alpha1.MacRunnerSet {
	got := &macvirtv1alpha1.MacRunnerSet{}
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
	return got
}

// sessionTTL is how long the fake keeps a message session nobody polls.
const sessionTTL = 15 * time.Second

// conditionMessage is the set's Ready message.
func conditionMessage(s *macvirtv1alpha1.MacRunnerSet) string {
	c := meta.FindStatusCondition(getSet(s).Status.Conditions, macvirtv1alpha1.ConditionReady)
	if c == nil {
		return ""
	}
	return c.Message
}

func readyReason(s *macvirtv1alpha1.MacRunnerSet) string {
	c := meta.FindStatusCondition(getSet(s).Status.Conditions, macvirtv1alpha1.ConditionReady)
	if c == nil {
		return ""
	}
	return c.Reason
}

// expectNothingLeft waits until the set has no claim, no machine that
// served one, and no runner registered on GitHub.
func expectNothingLeft(s *macvirtv1alpha1.MacRunnerSet, cw *claimWatch) {
	Eventually(func(g Gomega) {
		var claims macvirtv1alpha1.MacClaimList
		g.Expect(admin.List(ctx, &claims, client.InNamespace(s.Namespace), client.MatchingLabels{macvirtv1alpha1.LabelRunnerSet: s.Name})).To(Succeed())
		g.Expect(claims.Items).To(BeEmpty(), "the set's claims are released")
		var machines macvirtv1alpha1.MacMachineList
		g.Expect(admin.List(ctx, &machines)).To(Succeed())
		cw.mu.Lock()
		var left []string
		for _, m := range machines.Items {
			if _, was := cw.served[m.UID]; was {
				left = append(left, m.Name)
			}
		}
		cw.mu.Unlock()
		g.Expect(left).To(BeEmpty(), "the machines that served runners are deleted")
		for _, r := range gh.Runners() {
			g.Expect(r.Name).NotTo(HavePrefix(s.Name+"-"), "runner %s is removed from GitHub", r.Name)
		}
	}).Should(Succeed())
}

// expectOneJobPerMac checks every job succeeded, each on a runner of its
// own, and no Mac served two runners.
func expectOneJobPerMac(ids []string, cw *claimWatch) {
	seen := map[string]string{}
	for _, j := range jobsOf(ids) {
		Expect(j.State).To(Equal(fakegithub.JobCompleted), "job %s", j.ID)
		Expect(j.Result).To(Equal("succeeded"), "job %s", j.ID)
		Expect(j.RunnerName).NotTo(BeEmpty())
		Expect(seen).NotTo(HaveKey(j.RunnerName), "runner %s ran jobs %s and %s", j.RunnerName, seen[j.RunnerName], j.ID)
		seen[j.RunnerName] = j.ID
	}
	for name, n := range gh.RunnerJobCounts() {
		Expect(n).To(BeNumerically("<=", 1), "runner %s ran %d jobs", name, n)
	}
	_, reused, _, _ := cw.peak()
	Expect(reused).To(BeEmpty(), "no Mac serves two runners")
}

// queueWaits are the jobs' waits from assignment to the scale set until
// a runner took them, sorted.
func queueWaits(ids []string) []time.Duration {
	var waits []time.Duration
	for _, j := range jobsOf(ids) {
		if !j.RunnerAssignTime.IsZero() && !j.ScaleSetAssignTime.IsZero() {
			waits = append(waits, j.RunnerAssignTime.Sub(j.ScaleSetAssignTime))
		}
	}
	sort.Slice(waits, func(a, b int) bool { return waits[a] < waits[b] })
	return waits
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func show(what string, obj any) {
	raw, err := yaml.Marshal(obj)
	Expect(err).NotTo(HaveOccurred())
	_, _ = fmt.Fprintf(GinkgoWriter, "---- %s\n%s", what, raw)
}

var _ = Describe("A runner set", func() {
	It("runs a burst of 20 jobs on fresh Macs, one job per Mac, never above maxRunners, and leaves nothing behind", func() {
		ns := team("burst")
		cw := watchClaims(ns, "ios")
		set := runnerSet(ns, "ios")
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		By("the set's warm pool keeps minIdle Macs")
		Eventually(func(g Gomega) {
			pool := &macvirtv1alpha1.MacPool{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: "runners-burst-ios"}, pool)).To(Succeed())
			g.Expect(pool.Status.Idle).To(BeNumerically(">=", 2))
		}).Should(Succeed())

		ids := queue("ios", 20, 3*time.Second)
		shown := false
		Eventually(func(g Gomega) {
			if !shown {
				cur := getSet(set)
				if cur.Status.Running >= 3 {
					show("the runner set during the burst", cur.Status)
					var claims macvirtv1alpha1.MacClaimList
					g.Expect(admin.List(ctx, &claims, client.InNamespace(ns))).To(Succeed())
					for i := range claims.Items {
						if claims.Items[i].Annotations[macvirtv1alpha1.AnnotationRunnerJob] != "" {
							c := claims.Items[i]
							c.ManagedFields = nil
							show("one runner's claim during the burst", c)
							break
						}
					}
					shown = true
				}
			}
			for _, j := range jobsOf(ids) {
				g.Expect(j.State).To(Equal(fakegithub.JobCompleted), "job %s (%s)", j.ID, j.DisplayName)
			}
		}).WithTimeout(6 * time.Minute).Should(Succeed())
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		peak, _, claims, machines := cw.peak()
		Expect(cw.peakActive()).To(BeNumerically("<=", 5), "maxRunners holds for the runners that may take a job")
		Expect(peak).To(BeNumerically("<=", runnercore.MaxClaims(5)), "at most twice maxRunners claims, those being released included")
		Expect(claims).To(BeNumerically(">=", 20))
		Expect(machines).To(BeNumerically(">=", 20))
		waits := queueWaits(ids)
		Expect(waits).To(HaveLen(20))
		_, _ = fmt.Fprintf(GinkgoWriter, "burst: 20 jobs, %d claims, %d Macs, at most %d claims at once (%d not being released); queue wait p50 %s p99 %s max %s\n",
			claims, machines, peak, cw.peakActive(), percentile(waits, 0.5), percentile(waits, 0.99), waits[len(waits)-1])
		Expect(admin.Delete(ctx, set)).To(Succeed())
		Eventually(func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(set), &macvirtv1alpha1.MacRunnerSet{}) != nil
		}).Should(BeTrue(), "the set goes once its runners are released")
		Eventually(func() []fakegithub.ScaleSetView { return scaleSetsNamed("ios") }).Should(BeEmpty(), "its scale set is removed from GitHub")
	})
})

func scaleSetsNamed(name string) []fakegithub.ScaleSetView {
	var out []fakegithub.ScaleSetView
	for _, s := range gh.ScaleSets() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
