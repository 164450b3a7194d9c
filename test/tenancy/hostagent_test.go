package tenancy_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("A Mac's host agent", func() {
	ctx := context.Background()
	It("may report VMs and its Mac under the shipped role, and nothing else: no Secret, no spec, no claim", func() {
		const agent = "system:serviceaccount:macvirt-hosts:mac-t"
		By("config/rbac's host-agent role, bound as shipped to the macvirt-hosts ServiceAccounts")
		for _, obj := range shipped("host_agent_role.yaml") {
			Expect(admin.Create(ctx, obj)).To(Succeed())
		}
		Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "host-agent"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "host-agent"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:serviceaccounts:macvirt-hosts"}}})).To(Succeed())
		Eventually(func() bool {
			return allowed(agent, authorizationv1.ResourceAttributes{Verb: "create", Group: "macvirt.io", Resource: "machosts"})
		}).Should(BeTrue())

		type attempt struct {
			attrs authorizationv1.ResourceAttributes
			want  bool
		}
		r := func(verb, resource, sub, ns string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Verb: verb, Group: "macvirt.io", Resource: resource, Subresource: sub, Namespace: ns}
		}
		for _, a := range []attempt{
			{r("list", "macmachines", "", ""), true},
			{r("watch", "macmachines", "", ""), true},
			{r("patch", "macmachines", "status", "team-a"), true},
			{r("get", "macclasses", "", ""), true},
			{r("create", "machosts", "", ""), true},
			{r("patch", "machosts", "status", ""), true},
			{r("update", "macmachines", "", "team-a"), false},
			{r("patch", "macmachines", "", "macvirt-pools"), false},
			{r("delete", "macmachines", "", "team-a"), false},
			{r("patch", "machosts", "", ""), false},
			{r("delete", "machosts", "", ""), false},
			{r("get", "macclaims", "", "team-a"), false},
			{r("patch", "macclaims", "status", "team-a"), false},
			{r("update", "macclasses", "", ""), false},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "team-a"}, false},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "macvirt-system"}, false},
			{authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "team-a"}, false},
		} {
			Expect(allowed(agent, a.attrs)).To(Equal(a.want), "%s %s/%s in %q", a.attrs.Verb, a.attrs.Resource, a.attrs.Subresource, a.attrs.Namespace)
		}

		By("it registers its Mac, and the operator, under its shipped rules, reports on it")
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: agent,
			Groups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:macvirt-hosts"}}
		hostAgent, err := client.New(c, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		h := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-t"}}
		Expect(hostAgent.Create(ctx, h)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, h))).To(Succeed()) })
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			ready := meta.FindStatusCondition(h.Status.Conditions, macvirtv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(macvirtv1alpha1.ReasonHostNotRegistered))
		}).Should(Succeed())
		By("it may not cordon or uncordon a Mac: that is the admin's")
		before := h.DeepCopy()
		h.Spec.Unschedulable = true
		Expect(hostAgent.Patch(ctx, h, client.MergeFrom(before))).To(MatchError(ContainSubstring("forbidden")))
	})
})
