package tenancy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
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
		hostAgent := hostAgentClient("mac-t")
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

	It("reports only on its own Mac and the machines placed there, and only its own fields (the shipped admission policy)", func() {
		By("config/rbac's host-agent role and admission policy, as config/default names them")
		for _, file := range []string{"host_agent_role.yaml", "host_agent_policy.yaml"} {
			for _, obj := range shippedObjects(file) {
				obj.SetName("tenancy-" + obj.GetName())
				if b, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); ok {
					b.Spec.PolicyName = "tenancy-" + b.Spec.PolicyName
				}
				if b, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
					b.RoleRef.Name = "tenancy-" + b.RoleRef.Name
				}
				Expect(admin.Create(ctx, obj)).To(Succeed())
				DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, obj))).To(Succeed()) })
			}
		}
		agent := hostAgentClient("mac-p")
		mine := &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-p"}}
		Eventually(func() error { return agent.Create(ctx, mine) }).Should(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, mine))).To(Succeed()) })
		Eventually(func() error {
			return agent.Create(ctx, &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-q"}}, client.DryRunAll)
		}).Should(MatchError(ContainSubstring("a host agent registers and reports only its own Mac: mac-p, not mac-q")),
			"the API server learns of the policy")

		Expect(agent.Create(ctx, &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-p-labelled",
			Labels: map[string]string{"team": "ios"}}}, client.DryRunAll)).To(MatchError(ContainSubstring("only its own Mac")))
		labelled := hostAgentClient("mac-l")
		Expect(labelled.Create(ctx, &macvirtv1alpha1.MacHost{ObjectMeta: metav1.ObjectMeta{Name: "mac-l",
			Labels: map[string]string{"team": "ios"}}}, client.DryRunAll)).To(MatchError(ContainSubstring("registers its Mac without labels")))

		By("its own MacHost: status.agent yes, the operator's conditions no")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		before := mine.DeepCopy()
		now := metav1.Now()
		mine.Status.Agent = &macvirtv1alpha1.HostAgentReport{Tool: "tart", Slots: 2, LastHeartbeat: &now}
		Expect(agent.Status().Patch(ctx, mine, client.MergeFrom(before))).To(Succeed())
		before = mine.DeepCopy()
		meta.SetStatusCondition(&mine.Status.Conditions, metav1.Condition{Type: macvirtv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Forged", Message: "m"})
		Expect(agent.Status().Patch(ctx, mine, client.MergeFrom(before))).To(MatchError(ContainSubstring("Ready, Schedulable and machines are the operator's")))

		By("a machine placed on its Mac (made here as the operator places one), and one placed on another Mac")
		class := &macvirtv1alpha1.MacClass{ObjectMeta: metav1.ObjectMeta{Name: "tenancy-arm"}, Spec: macvirtv1alpha1.MacClassSpec{
			Runtime: macvirtv1alpha1.RuntimeVirtualization,
			Image: macvirtv1alpha1.ImageSpec{DiskSource: macvirtv1alpha1.DiskSource{Source: &cdiv1.DataVolumeSource{
				Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://ghcr.io/cirruslabs/macos-sequoia-base:latest")}}}},
			Placement: macvirtv1alpha1.PlacementSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "selects"}}}}}
		Expect(admin.Create(ctx, class)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, class))).To(Succeed()) })
		operatorClient := as(operatorUser)
		placed := func(name, host string) *macvirtv1alpha1.MacMachine {
			m := &macvirtv1alpha1.MacMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
				Spec: macvirtv1alpha1.MacMachineSpec{ClassName: class.Name, HostName: host}}
			Expect(operatorClient.Create(ctx, m)).To(Succeed())
			// Its Mac is deleted first: a machine of a Mac that is gone lets go at once.
			DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, m))).To(Succeed()) })
			return m
		}
		own, other := placed("on-mac-p", "mac-p"), placed("on-mac-q", "mac-q")
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, mine))).To(Succeed()) })

		By("status.host of its own machine: yes")
		Eventually(func() error {
			m := &macvirtv1alpha1.MacMachine{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(own), m); err != nil {
				return err
			}
			before := m.DeepCopy()
			m.Status.Host = &macvirtv1alpha1.HostVMStatus{VMName: "macvirt-" + string(m.UID), State: macvirtv1alpha1.HostVMCreating}
			return agent.Status().Patch(ctx, m, client.MergeFrom(before))
		}).Should(Succeed())
		By("the rest of its own machine's status, or its spec: no")
		m := &macvirtv1alpha1.MacMachine{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(own), m)).To(Succeed())
		before2 := m.DeepCopy()
		m.Status.Guest = &macvirtv1alpha1.GuestStatus{LastHeartbeat: &now, OSVersion: "forged"}
		Expect(agent.Status().Patch(ctx, m, client.MergeFrom(before2))).To(MatchError(ContainSubstring("only status.host of a machine")))
		By("any of another Mac's machine: no")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(other), m)).To(Succeed())
		before2 = m.DeepCopy()
		m.Status.Host = &macvirtv1alpha1.HostVMStatus{VMName: "forged", State: macvirtv1alpha1.HostVMDeleted}
		Expect(agent.Status().Patch(ctx, m, client.MergeFrom(before2))).To(MatchError(ContainSubstring(
			"machine team-a/on-mac-q is not placed on mac-p: its host agent alone reports on it")))
	})
})

// hostAgentClient acts as the host agent of the Mac name: the ServiceAccount
// of that name in macvirt-hosts.
func hostAgentClient(name string) client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:macvirt-hosts:" + name,
		Groups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:macvirt-hosts"}}
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// shippedObjects reads every object of a file of config/rbac: roles,
// bindings and admission policies.
func shippedObjects(file string) []client.Object {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "rbac", file)) //nolint:gosec // a file of the repository's config/rbac.
	Expect(err).NotTo(HaveOccurred())
	var out []client.Object
	for _, doc := range strings.Split(string(raw), "\n---") {
		var tm metav1.TypeMeta
		Expect(yaml.Unmarshal([]byte(doc), &tm)).To(Succeed())
		var obj client.Object
		switch tm.Kind {
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "ValidatingAdmissionPolicy":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		default:
			Fail("config/rbac/" + file + " holds a " + tm.Kind)
		}
		Expect(yaml.Unmarshal([]byte(doc), obj)).To(Succeed())
		out = append(out, obj)
	}
	return out
}
