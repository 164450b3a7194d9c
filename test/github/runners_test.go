package github_test

import (
	"fmt"
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/test/harness"
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

// watchClaims follows the set's claims and the machines bound to them
// until the spec ends.
func watchClaims(ns, set string) *harness.ClaimWatch {
	cw, err := harness.WatchClaims(ctx, world.Admin, ns, map[string]string{macvirtv1alpha1.LabelRunnerSet: set})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cw.Stop)
	return cw
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
func expectNothingLeft(s *macvirtv1alpha1.MacRunnerSet, cw *harness.ClaimWatch) {
	Eventually(func(g Gomega) {
		var claims macvirtv1alpha1.MacClaimList
		g.Expect(admin.List(ctx, &claims, client.InNamespace(s.Namespace), client.MatchingLabels{macvirtv1alpha1.LabelRunnerSet: s.Name})).To(Succeed())
		g.Expect(claims.Items).To(BeEmpty(), "the set's claims are released")
		var machines macvirtv1alpha1.MacMachineList
		g.Expect(admin.List(ctx, &machines)).To(Succeed())
		served := cw.Peaks().Served
		var left []string
		for _, m := range machines.Items {
			if _, was := served[m.UID]; was {
				left = append(left, m.Name)
			}
		}
		g.Expect(left).To(BeEmpty(), "the machines that served runners are deleted")
		for _, r := range gh.Runners() {
			g.Expect(r.Name).NotTo(HavePrefix(s.Name+"-"), "runner %s is removed from GitHub", r.Name)
		}
	}).Should(Succeed())
}

// expectOneJobPerMac checks every job succeeded, each on a runner of its
// own, and no Mac served two runners.
func expectOneJobPerMac(ids []string, cw *harness.ClaimWatch) {
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
	Expect(cw.Peaks().Reused()).To(BeEmpty(), "no Mac serves two runners")
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
		seen := cw.Peaks()
		peak, claims, machines := seen.All, len(seen.Claims), len(seen.Served)
		Expect(seen.Active).To(BeNumerically("<=", 5), "maxRunners holds for the runners that may take a job")
		Expect(peak).To(BeNumerically("<=", runnercore.MaxClaims(5)), "at most twice maxRunners claims, those being released included")
		Expect(claims).To(BeNumerically(">=", 20))
		Expect(machines).To(BeNumerically(">=", 20))
		waits := queueWaits(ids)
		Expect(waits).To(HaveLen(20))
		_, _ = fmt.Fprintf(GinkgoWriter, "burst: 20 jobs, %d claims, %d Macs, at most %d claims at once (%d not being released); queue wait p50 %s p99 %s max %s\n",
			claims, machines, peak, seen.Active, percentile(waits, 0.5), percentile(waits, 0.99), waits[len(waits)-1])
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
