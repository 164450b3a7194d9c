package tenancy_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("Runner sets", func() {
	ctx := context.Background()
	It("refuses a runner set naming credentials its author may not read; its author's own are fine", func() {
		By("dave may manage runner sets in team-a but not read its Secrets")
		for _, obj := range shipped("aggregated_runnerset_editor_role.yaml") {
			Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dave-runner-sets", Namespace: "team-a"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: obj.GetName()},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "dave"}}})).To(Succeed())
		}
		Eventually(func() bool {
			return allowed("dave", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "macvirt.io", Resource: "macrunnersets"})
		}).Should(BeTrue())
		set := func(name string) *macvirtv1alpha1.MacRunnerSet {
			return &macvirtv1alpha1.MacRunnerSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
				Spec: macvirtv1alpha1.MacRunnerSetSpec{
					GitHub:    macvirtv1alpha1.GitHubRunnerTarget{URL: "https://github.com/acme", CredentialsSecretName: "alices-app"},
					ClassName: "sonoma", MaxRunners: 1}}
		}
		Expect(as("dave").Create(ctx, set("borrowed"))).To(MatchError(ContainSubstring(
			`spec.github.credentialsSecretName: Forbidden: dave may not get secret "alices-app" in namespace team-a`)))

		By("alice, who may read her namespace's Secrets, may name them")
		own := set("own")
		Expect(as("alice").Create(ctx, own)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(own), own)).To(Succeed())
			g.Expect(own.Finalizers).NotTo(BeEmpty())
		}).Should(Succeed(), "the operator, under the shipped rules, adds its finalizer")
		Expect(admin.Delete(ctx, own)).To(Succeed())
		Eventually(func() error { return admin.Get(ctx, client.ObjectKeyFromObject(own), &macvirtv1alpha1.MacRunnerSet{}) }).
			Should(MatchError(ContainSubstring("not found")), "the operator, under the shipped rules, lets its finalizer go")

		By("mallory may not create runner sets in another team's namespace at all")
		other := set("intruder")
		Expect(as("mallory").Create(ctx, other)).To(MatchError(ContainSubstring("forbidden")))
	})
})
