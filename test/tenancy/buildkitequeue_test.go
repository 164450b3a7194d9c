package tenancy_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("Buildkite queues", func() {
	ctx := context.Background()
	It("refuses a queue naming a token its author may not read; its author's own are fine", func() {
		By("dave may manage Buildkite queues in team-a but not read its Secrets")
		for _, obj := range shipped("aggregated_buildkite_queue_editor_role.yaml") {
			Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave-buildkite-queues", Namespace: "team-a"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: obj.GetName()},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "dave"}}})).To(Succeed())
		}
		Eventually(func() bool {
			return allowed("dave", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "macvirt.io", Resource: "macbuildkitequeues"})
		}).Should(BeTrue())
		queue := func(name string) *macvirtv1alpha1.MacBuildkiteQueue {
			return &macvirtv1alpha1.MacBuildkiteQueue{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
				Spec: macvirtv1alpha1.MacBuildkiteQueueSpec{
					Buildkite: macvirtv1alpha1.BuildkiteTarget{Queue: "macos", TokenSecretName: "alices-app"},
					ClassName: "sonoma", MaxAgents: 1}}
		}
		Expect(as("dave").Create(ctx, queue("borrowed"))).To(MatchError(ContainSubstring(
			`spec.buildkite.tokenSecretName: Forbidden: dave may not get secret "alices-app" in namespace team-a`)))

		By("alice, who may read her namespace's Secrets, may name them; the operator says what the Secret lacks")
		own := queue("own")
		Expect(as("alice").Create(ctx, own)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(own), own)).To(Succeed())
			g.Expect(own.Finalizers).NotTo(BeEmpty())
			ready := meta.FindStatusCondition(own.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonCredentialsInvalid))
		}).Should(Succeed(), "the operator, under the shipped rules, adds its finalizer and writes the status")
		By("dave may edit alice's queue, but not send its token to another queue or endpoint")
		// Each update reads the queue afresh: the operator may write it
		// between a read and an update (a conflict is not what is tested).
		update := func(change func(*macvirtv1alpha1.MacBuildkiteQueue)) func() error {
			return func() error {
				cur := &macvirtv1alpha1.MacBuildkiteQueue{}
				if err := as("dave").Get(ctx, client.ObjectKeyFromObject(own), cur); err != nil {
					return err
				}
				change(cur)
				return as("dave").Update(ctx, cur)
			}
		}
		notConflict := func(err error) bool { return !apierrors.IsConflict(err) }
		Eventually(update(func(q *macvirtv1alpha1.MacBuildkiteQueue) { q.Spec.Buildkite.Queue = "daves-queue" })).
			Should(SatisfyAll(Satisfy(notConflict), MatchError(ContainSubstring(
				`spec.buildkite.tokenSecretName: Forbidden: dave may not get secret "alices-app" in namespace team-a`))))
		Eventually(update(func(q *macvirtv1alpha1.MacBuildkiteQueue) { q.Spec.MaxAgents = 2 })).
			Should(Succeed(), "a change that keeps the token where it goes is his to make")
		Expect(admin.Delete(ctx, own)).To(Succeed())
		Eventually(func() error {
			return admin.Get(ctx, client.ObjectKeyFromObject(own), &macvirtv1alpha1.MacBuildkiteQueue{})
		}).
			Should(MatchError(ContainSubstring("not found")), "the operator, under the shipped rules, lets its finalizer go")

		By("mallory may not create Buildkite queues in another team's namespace at all")
		Expect(as("mallory").Create(ctx, queue("intruder"))).To(MatchError(ContainSubstring("forbidden")))
	})
})
