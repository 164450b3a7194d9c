package buildkite_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakebuildkite"
)

// newQueue creates a queue in ns on the fake Buildkite's queue: the CI
// class, at most three agents, one warm Mac, buildkite-agent under the
// guest account's home. It is deleted when the spec ends.
func newQueue(ns, name string, mutate ...func(*macvirtv1alpha1.MacBuildkiteQueue)) *macvirtv1alpha1.MacBuildkiteQueue {
	q := &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{
			Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: queueKey, TokenSecretName: "buildkite", Endpoint: bk.URL()},
			ClassName: ciClass, MaxAgents: 3, MinIdle: 1,
			JobTimeout:   &metav1.Duration{Duration: 10 * time.Minute},
			StartTimeout: &metav1.Duration{Duration: 3 * time.Minute},
			Agent:        macvirtv1alpha1.BuildkiteAgentInstall{Path: "bin/buildkite-agent"},
		}}
	for _, m := range mutate {
		m(q)
	}
	Expect(admin.Create(ctx, q)).To(Succeed())
	// Queues share the fake's Buildkite queue: one a failed spec left
	// would take the next spec's jobs.
	DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, q))).To(Succeed()) })
	return q
}

func readyOf(q *macvirtv1alpha1.MacBuildkiteQueue) *metav1.Condition {
	cur := &macvirtv1alpha1.MacBuildkiteQueue{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(q), cur); err != nil {
		return nil
	}
	return meta.FindStatusCondition(cur.Status.Conditions, macvirtv1alpha1.ConditionReady)
}

func readyReason(q *macvirtv1alpha1.MacBuildkiteQueue) string {
	if c := readyOf(q); c != nil {
		return c.Reason
	}
	return ""
}

// watchClaims follows the queue's claims and the machines bound to them
// until the spec ends.
func watchClaims(ns, queue string) *harness.ClaimWatch {
	cw, err := harness.WatchClaims(ctx, world.Admin, ns, map[string]string{macvirtv1alpha1.LabelBuildkiteQueue: queue})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cw.Stop)
	return cw
}

func show(what string, v any) {
	out, err := yaml.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	_, _ = fmt.Fprintf(GinkgoWriter, "--- %s\n%s", what, out)
}

var _ = Describe("A Buildkite queue", func() {
	It("runs a burst of 10 jobs on 3 Macs at a time, one fresh Mac per job, and leaves nothing behind", func() {
		ns := team("burst", agentToken)
		cw := watchClaims(ns, "ios")
		q := newQueue(ns, "ios")
		Eventually(func() string { return readyReason(q) }).Should(Equal(macvirtv1alpha1.ReasonPolling))
		registered := &macvirtv1alpha1.MacBuildkiteQueue{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(q), registered)).To(Succeed())
		stack := registered.Status.StackKey
		Expect(bk.Stacks()).To(ContainElement(stack), "the queue's stack is registered as its status says")
		By("the queue's warm pool keeps minIdle Macs")
		poolName := ""
		Eventually(func(g Gomega) {
			cur := &macvirtv1alpha1.MacBuildkiteQueue{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(q), cur)).To(Succeed())
			poolName = cur.Status.WarmPoolName
			g.Expect(poolName).To(HavePrefix("buildkite-burst-ios-"))
			pool := &macvirtv1alpha1.MacPool{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: poolName}, pool)).To(Succeed())
			g.Expect(pool.Status.Idle).To(BeNumerically(">=", 1))
		}).Should(Succeed())

		var ids []string
		for i := range 10 {
			ids = append(ids, bk.AddJob(fmt.Sprintf("echo job %d ran as $BUILDKITE_JOB_ID; sleep 2", i)))
		}
		shown := false
		Eventually(func(g Gomega) {
			if !shown {
				cur := &macvirtv1alpha1.MacBuildkiteQueue{}
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(q), cur)).To(Succeed())
				if cur.Status.Running >= 2 {
					show("the queue during the burst", cur.Status)
					shown = true
				}
			}
			for _, id := range ids {
				j, _ := bk.Job(id)
				g.Expect(j.State).To(Equal(fakebuildkite.StateFinished), "job %s", id)
			}
		}).WithTimeout(6 * time.Minute).Should(Succeed())

		By("each job ran once, to success, on an agent of its own, and no Mac served two agents")
		agents := map[string]string{}
		for i, id := range ids {
			j, _ := bk.Job(id)
			Expect(j.ExitStatus).To(Equal(0), "job %s: %s", id, j.Output)
			Expect(j.Acquisitions).To(Equal(1), "job %s", id)
			Expect(j.Output).To(ContainSubstring(fmt.Sprintf("job %d ran as %s", i, id)))
			Expect(j.Agent).To(HavePrefix("ios-"), "job %s ran on agent %q, not one of the queue's", id, j.Agent)
			Expect(agents).NotTo(HaveKey(j.Agent), "agent %s ran jobs %s and %s", j.Agent, agents[j.Agent], id)
			agents[j.Agent] = id
		}
		seen := cw.Peaks()
		peak, peakAll, claims, machines := seen.Active, seen.All, len(seen.Claims), len(seen.Served)
		Expect(seen.Reused()).To(BeEmpty(), "no Mac serves two agents")
		Expect(peak).To(BeNumerically("<=", 3), "maxAgents holds for the agents that may take a job")
		Expect(peak).To(BeNumerically(">=", 2), "agents ran side by side")
		Expect(peakAll).To(BeNumerically("<=", runnercore.MaxClaims(3)), "claims whose Macs are being released are bounded too")
		Expect(claims).To(BeNumerically(">=", 10))
		Expect(machines).To(BeNumerically(">=", 10))

		By("nothing is left: claims, job Secrets, the Macs that ran jobs")
		Eventually(func(g Gomega) {
			var cl macvirtv1alpha1.MacClaimList
			g.Expect(admin.List(ctx, &cl, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelBuildkiteQueue: "ios"})).To(Succeed())
			g.Expect(cl.Items).To(BeEmpty())
			var secrets corev1.SecretList
			g.Expect(admin.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelBuildkiteQueue: "ios"})).To(Succeed())
			g.Expect(secrets.Items).To(BeEmpty(), "job Secrets go with their claims")
			var ms macvirtv1alpha1.MacMachineList
			g.Expect(admin.List(ctx, &ms)).To(Succeed())
			served := cw.Peaks().Served
			for _, m := range ms.Items {
				g.Expect(served).NotTo(HaveKey(m.UID), "Mac %s ran a job and is still there", m.Name)
			}
		}).Should(Succeed())
		calls := bk.Calls()
		_, _ = fmt.Fprintf(GinkgoWriter, "burst: 10 jobs, %d claims, %d Macs, at most %d claims at once (%d with those being released); Buildkite calls: %d polls, %d reservations, %d tokens, %d state reads\n",
			claims, machines, peak, peakAll, calls["GET scheduled-jobs"], calls["PUT batch-reserve"], calls["POST job-acquisition-tokens"], calls["POST get-states"])
		Expect(calls["POST job-acquisition-tokens"]).To(Equal(10), "one token per job, none to spare")

		Expect(admin.Delete(ctx, q)).To(Succeed())
		Eventually(func() bool {
			return admin.Get(ctx, client.ObjectKeyFromObject(q), &macvirtv1alpha1.MacBuildkiteQueue{}) != nil
		}).Should(BeTrue(), "the queue goes")
		Expect(bk.Stacks()).NotTo(ContainElement(stack), "its stack is deregistered")
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKey{Name: poolName}, &macvirtv1alpha1.MacPool{})
		}).ShouldNot(Succeed(), "its warm pool is deleted")
	})

	It("fails a job in Buildkite, saying why, when its Mac's agent does not start, instead of passing it to Mac after Mac", func() {
		ns := team("broken", agentToken)
		cw := watchClaims(ns, "ios")
		q := newQueue(ns, "ios", func(q *macvirtv1alpha1.MacBuildkiteQueue) {
			q.Spec.Agent.Path, q.Spec.MinIdle, q.Spec.MaxAgents = "bin/no-such-agent", 0, 1
		})
		Eventually(func() string { return readyReason(q) }).Should(Equal(macvirtv1alpha1.ReasonPolling))
		id := bk.AddJob("echo never")
		Eventually(func(g Gomega) {
			j, _ := bk.Job(id)
			g.Expect(j.State).To(Equal(fakebuildkite.StateFinished))
			g.Expect(j.ExitStatus).To(Equal(-1))
			g.Expect(j.Detail).To(ContainSubstring("did not take this job"))
			g.Expect(j.Detail).To(ContainSubstring("MacBuildkiteQueue broken/ios"))
			g.Expect(j.Acquisitions).To(BeZero())
		}).WithTimeout(4 * time.Minute).Should(Succeed())
		j, _ := bk.Job(id)
		_, _ = fmt.Fprintf(GinkgoWriter, "the failed job's detail in Buildkite: %s\n", j.Detail)
		Eventually(func(g Gomega) {
			var cl macvirtv1alpha1.MacClaimList
			g.Expect(admin.List(ctx, &cl, client.InNamespace(ns), client.MatchingLabels{macvirtv1alpha1.LabelBuildkiteQueue: "ios"})).To(Succeed())
			g.Expect(cl.Items).To(BeEmpty())
		}).Should(Succeed(), "no Mac is claimed for a job that failed")
		Expect(cw.Peaks().Claims).To(HaveLen(1), "one Mac tried the job")
	})

	It("says which Secret holds a token Buildkite refuses, and claims no Mac", func() {
		ns := team("refused", "bkct_not_the_token")
		q := newQueue(ns, "ios")
		Eventually(func() string { return readyReason(q) }).Should(Equal(macvirtv1alpha1.ReasonCredentialsInvalid))
		c := readyOf(q)
		Expect(c.Message).To(ContainSubstring("Secret refused/buildkite (key token)"))
		Expect(c.Message).To(ContainSubstring("401"))
		cur := &macvirtv1alpha1.MacBuildkiteQueue{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(q), cur)).To(Succeed())
		Expect(meta.IsStatusConditionTrue(cur.Status.Conditions, macvirtv1alpha1.ConditionStalled)).To(BeTrue())
		var cl macvirtv1alpha1.MacClaimList
		Expect(admin.List(ctx, &cl, client.InNamespace(ns))).To(Succeed())
		Expect(cl.Items).To(BeEmpty())
		Expect(strings.Join(bk.Stacks(), ",")).NotTo(ContainSubstring("refused"))
	})
})
