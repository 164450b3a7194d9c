package github_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/runnercore"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/fakegithub"
)

// onDemand: runners' Macs are made on demand from the class, no warm pool.
func onDemand(max int32) func(*macvirtv1alpha1.MacRunnerSet) {
	return func(s *macvirtv1alpha1.MacRunnerSet) { s.Spec.MinIdle, s.Spec.MaxRunners = 0, max }
}

func allCompleted(ids []string) func(Gomega) {
	return func(g Gomega) {
		for _, j := range jobsOf(ids) {
			g.Expect(j.State).To(Equal(fakegithub.JobCompleted), "job %s (%s)", j.ID, j.DisplayName)
		}
	}
}

func claimsOf(s *macvirtv1alpha1.MacRunnerSet) []macvirtv1alpha1.MacClaim {
	var claims macvirtv1alpha1.MacClaimList
	Expect(admin.List(ctx, &claims, client.InNamespace(s.Namespace), client.MatchingLabels{macvirtv1alpha1.LabelRunnerSet: s.Name})).To(Succeed())
	return claims.Items
}

func deleteSet(s *macvirtv1alpha1.MacRunnerSet) {
	Expect(client.IgnoreNotFound(admin.Delete(ctx, s))).To(Succeed())
	Eventually(func() bool {
		return admin.Get(ctx, client.ObjectKeyFromObject(s), &macvirtv1alpha1.MacRunnerSet{}) != nil
	}).Should(BeTrue(), "the set goes once its runners are released")
	Eventually(func() []fakegithub.ScaleSetView { return scaleSetsNamed(s.EffectiveScaleSetName()) }).Should(BeEmpty())
}

func eventReasons(s *macvirtv1alpha1.MacRunnerSet) string {
	var events corev1.EventList
	Expect(admin.List(ctx, &events, client.InNamespace(s.Namespace))).To(Succeed())
	var out []string
	for _, e := range events.Items {
		if e.InvolvedObject.Name == s.Name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return strings.Join(out, "\n")
}

// killOperator stops the operator as a kill would: its sessions stay open
// on GitHub, which would keep them 10 minutes (until the spec ends).
func killOperator() {
	gh.SetSessionTTL(10 * time.Minute)
	DeferCleanup(gh.SetSessionTTL, sessionTTL)
	gh.DropSessionCloses(true)
	system.StopOperator()
	gh.DropSessionCloses(false)
}

var _ = Describe("A runner set under faults", func() {
	It("closes the session a killed operator left open and goes on at once, one runner per job", func() {
		ns := team("restart")
		cw := watchClaims(ns, "restart")
		set := runnerSet(ns, "restart", onDemand(3))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		ids := queue("restart", 6, 4*time.Second)
		Eventually(func() int32 { return getSet(set).Status.Running }).Should(BeNumerically(">=", 1))
		Expect(getSet(set).Status.MessageSessionID).NotTo(BeEmpty())

		By("killing the operator: its session is never closed, and GitHub would keep it 10 minutes")
		killOperator()
		old := gh.Sessions()
		Expect(old).To(HaveLen(1), "the dead operator's session is still open on GitHub")
		Expect(system.StartOperator(ctx, harness.OperatorOptions{})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(readyReason(set)).To(Equal(macvirtv1alpha1.ReasonListening))
			now := gh.Sessions()
			g.Expect(now).To(HaveLen(1))
			g.Expect(now[0].ID).NotTo(Equal(old[0].ID))
		}).WithTimeout(time.Minute).Should(Succeed(), "the new operator closed the old session and opened its own")

		Eventually(allCompleted(ids)).WithTimeout(4 * time.Minute).Should(Succeed())
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		seen := cw.Peaks()
		Expect(seen.Claims).To(HaveLen(len(ids)), "one runner per job, none for no job")
		Expect(seen.Active).To(BeNumerically("<=", 3), "maxRunners holds for the runners that may take a job")
		Expect(seen.All).To(BeNumerically("<=", runnercore.MaxClaims(3)))
		deleteSet(set)
	})

	It("works from the jobs it held while a session it cannot close lives, and makes no runner for no job", func() {
		ns := team("held")
		cw := watchClaims(ns, "held")
		set := runnerSet(ns, "held", onDemand(3))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		ids := queue("held", 6, 4*time.Second)
		Eventually(func() int32 { return getSet(set).Status.Running }).Should(BeNumerically(">=", 1))

		By("killing the operator, and losing the session's id (another listener's session looks the same)")
		killOperator()
		lost := getSet(set)
		lost.Status.MessageSessionID = "6f1c0b7e-9d1a-4c55-8a53-2f0f3b7d9e10"
		Expect(admin.Status().Update(ctx, lost)).To(Succeed())
		held := lost.Status.AssignedJobs
		Expect(held).To(BeNumerically(">=", 1))
		Expect(system.StartOperator(ctx, harness.OperatorOptions{})).To(Succeed())
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonSessionConflict),
			"GitHub answers 409 while the old session lives, and the set says so")

		By("the held jobs end with their runners; no runner is made for a job GitHub has not given the set")
		Eventually(func() int32 { return getSet(set).Status.AssignedJobs }).WithTimeout(2*time.Minute).Should(BeZero(),
			"the held jobs left with their runners")
		Expect(readyReason(set)).To(Equal(macvirtv1alpha1.ReasonSessionConflict))
		Expect(conditionMessage(set)).To(ContainSubstring("works from the 0 jobs GitHub had assigned"))
		Consistently(func() int32 { return getSet(set).Status.Desired }).WithTimeout(5 * time.Second).Should(BeZero())

		By("the old session expiring")
		gh.SetSessionTTL(sessionTTL)
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		Eventually(allCompleted(ids)).WithTimeout(4 * time.Minute).Should(Succeed())
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		Expect(cw.Peaks().Claims).To(HaveLen(len(ids)), "one runner per job, none for no job")
		deleteSet(set)
	})

	It("keeps its session through a short outage: no second session, no 409 after it", func() {
		ns := team("blip")
		cw := watchClaims(ns, "blip")
		set := runnerSet(ns, "blip", onDemand(2))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		opened := gh.SessionsOpened()
		gh.FailFor(sessionTTL/2, 503)
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonGitHubUnavailable))
		By("the first answer after the outage, with no message waiting, confirms the count the set held")
		Eventually(func(g Gomega) {
			g.Expect(readyReason(set)).To(Equal(macvirtv1alpha1.ReasonListening))
			g.Expect(conditionMessage(set)).NotTo(ContainSubstring("count is awaited"))
		}).WithTimeout(time.Minute).Should(Succeed())
		ids := queue("blip", 2, 2*time.Second)
		Eventually(allCompleted(ids)).WithTimeout(2 * time.Minute).Should(Succeed())
		Expect(gh.SessionsOpened()).To(Equal(opened), "the session the outage interrupted was polled again")
		Expect(getSet(set).Status.LastGitHubError.StatusCode).To(Equal(int32(503)), "no 409 followed the outage")
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		deleteSet(set)
	})

	It("waits out a minute of 5xx from GitHub, saying so, and runs the jobs after", func() {
		ns := team("outage")
		cw := watchClaims(ns, "outage")
		set := runnerSet(ns, "outage", onDemand(3))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		gh.FailFor(time.Minute, 503)
		ids := queue("outage", 3, 2*time.Second)
		Eventually(func(g Gomega) {
			s := getSet(set)
			g.Expect(s.Status.LastGitHubError).NotTo(BeNil())
			g.Expect(s.Status.LastGitHubError.StatusCode).To(Equal(int32(503)))
			g.Expect(meta.FindStatusCondition(s.Status.Conditions, macvirtv1alpha1.ConditionReady).Reason).To(Equal(macvirtv1alpha1.ReasonGitHubUnavailable))
		}).Should(Succeed())
		Eventually(allCompleted(ids)).WithTimeout(4 * time.Minute).Should(Succeed())
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		deleteSet(set)
	})

	It("releases the Mac of a job cancelled while the Mac boots, and removes its runner", func() {
		ns := team("cancel")
		cw := watchClaims(ns, "cancel")
		set := runnerSet(ns, "cancel", onDemand(2))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		ids := queue("cancel", 1, time.Minute)
		Eventually(func() []macvirtv1alpha1.MacClaim { return claimsOf(set) }).Should(HaveLen(1))
		Expect(gh.CancelJob(ids[0])).To(Succeed())
		expectNothingLeft(set, cw)
		j, _ := gh.Job(ids[0])
		Expect(j.Result).To(Equal("canceled"))
		Expect(j.RunnerName).To(BeEmpty(), "no runner ran it")
		deleteSet(set)
	})

	It("runs a re-assigned job once, on one fresh Mac", func() {
		ns := team("reassign")
		cw := watchClaims(ns, "reassign")
		set := runnerSet(ns, "reassign", onDemand(2))
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		ids := queue("reassign", 1, 2*time.Second)
		Eventually(func() fakegithub.JobState { j, _ := gh.Job(ids[0]); return j.State }).Should(Equal(fakegithub.JobAssigned))
		Expect(gh.Reassign(ids[0])).To(Succeed())
		Eventually(allCompleted(ids)).Should(Succeed())
		j, _ := gh.Job(ids[0])
		Expect(j.Attempts).To(Equal(2))
		expectOneJobPerMac(ids, cw)
		expectNothingLeft(set, cw)
		deleteSet(set)
	})

	It("cleans up a runner that never comes online, a job past its timeout and a Mac that dies mid-job", func() {
		ns := team("cleanup")
		cw := watchClaims(ns, "hung")
		By("a runner that never comes online")
		hung := runnerSet(ns, "hung", onDemand(1), func(s *macvirtv1alpha1.MacRunnerSet) {
			s.Spec.Runner.Directory = "hung-runner"
			s.Spec.RegistrationTimeout = &metav1.Duration{Duration: 8 * time.Second}
		})
		ids := queue("hung", 1, time.Second)
		Eventually(func() string { return eventReasons(hung) }).Should(ContainSubstring("did not come online within the set's registrationTimeout"))
		Expect(cw.Peaks().Claims).NotTo(BeEmpty())
		Expect(gh.CancelJob(ids[0])).To(Succeed())
		expectNothingLeft(hung, cw)
		deleteSet(hung)

		By("a job past the set's jobTimeout")
		cw = watchClaims(ns, "slow")
		slow := runnerSet(ns, "slow", onDemand(1), func(s *macvirtv1alpha1.MacRunnerSet) {
			s.Spec.JobTimeout = &metav1.Duration{Duration: 5 * time.Second}
		})
		ids = queue("slow", 1, 10*time.Minute)
		Eventually(func() string { return eventReasons(slow) }).Should(ContainSubstring("ran longer than the set's jobTimeout"))
		Eventually(func() string { j, _ := gh.Job(ids[0]); return j.Result }).Should(Equal("failed"), "GitHub fails the job once its runner is lost")
		expectNothingLeft(slow, cw)
		deleteSet(slow)

		By("a Mac that dies mid-job")
		cw = watchClaims(ns, "dies")
		dies := runnerSet(ns, "dies", onDemand(1))
		ids = queue("dies", 1, 10*time.Minute)
		var machine *macvirtv1alpha1.ObjectRef
		Eventually(func(g Gomega) {
			j, _ := gh.Job(ids[0])
			g.Expect(j.State).To(Equal(fakegithub.JobRunning))
			cs := claimsOf(dies)
			g.Expect(cs).To(HaveLen(1))
			g.Expect(cs[0].Status.MachineRef).NotTo(BeNil())
			machine = cs[0].Status.MachineRef
		}).Should(Succeed())
		Expect(admin.Delete(ctx, &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Name}})).To(Succeed())
		Eventually(func() string { j, _ := gh.Job(ids[0]); return j.Result }).Should(Equal("failed"))
		expectNothingLeft(dies, cw)
		Expect(eventReasons(dies)).To(Or(ContainSubstring("its Mac was lost"), ContainSubstring("completed: failed")))
		deleteSet(dies)
	})

	It("says, in the API server's words, when its class refuses its runners or its warm pool", func() {
		ns := team("refused")
		base := &macvirtv1alpha1.MacClass{}
		Expect(admin.Get(ctx, client.ObjectKey{Name: ciClass}, base)).To(Succeed())
		noBootstrap := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "no-bootstrap"}, Spec: *base.Spec.DeepCopy()}
		no := false
		noBootstrap.Spec.Tenancy.AllowTenantBootstrap = &no
		Expect(admin.Create(ctx, noBootstrap)).To(Succeed())
		elsewhere := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}, Spec: *base.Spec.DeepCopy()}
		elsewhere.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "other"}}
		Expect(admin.Create(ctx, elsewhere)).To(Succeed())

		By("a class that allows no tenant bootstrap: the runner's claim is refused")
		set := runnerSet(ns, "refused", onDemand(1), func(s *macvirtv1alpha1.MacRunnerSet) { s.Spec.ClassName = "no-bootstrap" })
		Eventually(func() string { return readyReason(set) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		ids := queue("refused", 1, time.Second)
		Eventually(func(g Gomega) {
			ready := meta.FindStatusCondition(getSet(set).Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonClassUnavailable))
			g.Expect(ready.Message).To(ContainSubstring("denied the request"), "the API server's words")
			g.Expect(ready.Message).To(ContainSubstring("allowTenantBootstrap"))
		}).Should(Succeed())
		Expect(eventReasons(set)).To(ContainSubstring("ClaimRefused"))
		Expect(gh.CancelJob(ids[0])).To(Succeed())
		deleteSet(set)

		By("a warm pool of a class the namespace may not claim is not made")
		pooled := runnerSet(ns, "pooled", func(s *macvirtv1alpha1.MacRunnerSet) { s.Spec.ClassName, s.Spec.MinIdle = "elsewhere", 1 })
		Eventually(func(g Gomega) {
			s := getSet(pooled)
			ready := meta.FindStatusCondition(s.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonClassUnavailable))
			g.Expect(ready.Message).To(HavePrefix("spec.className: "))
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, macvirtv1alpha1.ConditionStalled)).To(BeTrue())
		}).Should(Succeed())
		Expect(admin.Get(ctx, client.ObjectKey{Name: "runners-refused-pooled"}, &macvirtv1alpha1.MacPool{})).NotTo(Succeed())
		deleteSetAnyway(pooled)
	})

	It("keeps a scale set to the oldest set naming it", func() {
		first := runnerSet(team("first"), "shared", onDemand(1))
		Eventually(func() string { return readyReason(first) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		second := runnerSet(team("second"), "shared", onDemand(1))
		Eventually(func() string { return readyReason(second) }).Should(Equal(macvirtv1alpha1.ReasonScaleSetInUse))
		Expect(meta.FindStatusCondition(getSet(second).Status.Conditions, macvirtv1alpha1.ConditionReady).Message).To(ContainSubstring("MacRunnerSet first/shared"))
		// Not deleteSet: the second set may register the scale set again
		// as soon as the first is gone.
		deleteSetAnyway(first)
		Eventually(func() string { return readyReason(second) }).Should(Equal(macvirtv1alpha1.ReasonListening), "the scale set is free again")
		deleteSet(second)
	})

	It("names the refused credential, and the rate limit's reset", func() {
		ns := team("creds")
		Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong"},
			StringData: map[string]string{"token": "github_pat_wrong"}})).To(Succeed()) //nolint:gosec // the fake GitHub refuses it.
		bad := runnerSet(ns, "bad", onDemand(1), func(s *macvirtv1alpha1.MacRunnerSet) { s.Spec.GitHub.CredentialsSecretName = "wrong" })
		Eventually(func(g Gomega) {
			s := getSet(bad)
			ready := meta.FindStatusCondition(s.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonCredentialsInvalid))
			g.Expect(ready.Message).To(ContainSubstring("the token in Secret creds/wrong (key token)"))
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, macvirtv1alpha1.ConditionStalled)).To(BeTrue())
			g.Expect(s.Status.LastGitHubError.StatusCode).To(Equal(int32(401)))
		}).Should(Succeed())
		deleteSetAnyway(bad)

		missing := runnerSet(ns, "missing", onDemand(1), func(s *macvirtv1alpha1.MacRunnerSet) { s.Spec.GitHub.CredentialsSecretName = "nope" })
		Eventually(func() string {
			c := meta.FindStatusCondition(getSet(missing).Status.Conditions, macvirtv1alpha1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Message
		}).Should(ContainSubstring("Secret creds/nope does not exist"))
		deleteSetAnyway(missing)

		limited := runnerSet(ns, "limited", onDemand(1))
		Eventually(func() string { return readyReason(limited) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		gh.RateLimitFor(20 * time.Second)
		Eventually(func(g Gomega) {
			s := getSet(limited)
			g.Expect(s.Status.LastGitHubError).NotTo(BeNil())
			g.Expect(s.Status.LastGitHubError.RateLimitReset).NotTo(BeNil())
			g.Expect(s.Status.LastGitHubError.Message).To(ContainSubstring("rate limit"))
		}).Should(Succeed())
		Eventually(func() string { return readyReason(limited) }).Should(Equal(macvirtv1alpha1.ReasonListening))
		deleteSet(limited)
	})
})

// deleteSetAnyway deletes a set that never registered a scale set: it
// goes at once, as nothing of it is on GitHub.
func deleteSetAnyway(s *macvirtv1alpha1.MacRunnerSet) {
	Expect(admin.Delete(ctx, s)).To(Succeed())
	Eventually(func() bool {
		return admin.Get(ctx, client.ObjectKeyFromObject(s), &macvirtv1alpha1.MacRunnerSet{}) != nil
	}).Should(BeTrue())
}
