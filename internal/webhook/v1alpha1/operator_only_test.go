package v1alpha1

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// Each write only the operator may make, as a create and as an update.
func TestOperatorOnlyChanges(t *testing.T) {
	poolRef := metav1.OwnerReference{APIVersion: "macvirt.io/v1alpha1", Kind: "MacPool", Name: "ci", UID: "pool-uid", Controller: ptrTo(true)}
	for _, tc := range []struct {
		name  string
		old   *macvirtv1alpha1.MacMachine // nil: a create
		mod   func(*macvirtv1alpha1.MacMachine)
		field string // "" when allowed
	}{
		{"a plain machine", nil, func(*macvirtv1alpha1.MacMachine) {}, ""},
		{"a claimRef", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-b", Name: "db", UID: "claim-uid"}
		}, "spec.claimRef"},
		{"a host", nil, func(m *macvirtv1alpha1.MacMachine) { m.Spec.HostName = "mac-a" }, "spec.hostName"},
		{"suspension while idle", nil, func(m *macvirtv1alpha1.MacMachine) { m.Spec.SuspendWhenIdle = true }, "spec.suspendWhenIdle"},
		{"the pool label", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelPool: "ci"}
		}, "metadata.labels[macvirt.io/pool]"},
		{"the released label", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Labels = map[string]string{macvirtv1alpha1.LabelReleased: "true"}
		}, "metadata.labels[macvirt.io/released]"},
		{"the agent token's hash", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: "0123"}
		}, "metadata.annotations[macvirt.io/agent-token-sha256]"},
		{"the agent Secret", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentSecret: "someone-elses"}
		}, "metadata.annotations[macvirt.io/agent-secret]"},
		{"the reclaim policy", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations = map[string]string{macvirtv1alpha1.AnnotationReclaimPolicy: "Retain"}
		}, "metadata.annotations[macvirt.io/reclaim-policy]"},
		{"an owner reference to a pool", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = []metav1.OwnerReference{poolRef}
		}, "metadata.ownerReferences[0]"},
		{"an owner reference to something not macvirt's", nil, func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "cm-uid"}}
		}, ""},
		{"an update of spec.running", minimalMachine(), func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.Running = ptrTo(false)
		}, ""},
		{"an update that changes the token's hash", withAnnotation(macvirtv1alpha1.AnnotationAgentTokenHash, "0123"), func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations[macvirtv1alpha1.AnnotationAgentTokenHash] = "4567"
		}, "metadata.annotations[macvirt.io/agent-token-sha256]"},
		{"an update that removes the token's hash (to have a new token issued)", withAnnotation(macvirtv1alpha1.AnnotationAgentTokenHash, "0123"), func(m *macvirtv1alpha1.MacMachine) {
			delete(m.Annotations, macvirtv1alpha1.AnnotationAgentTokenHash)
		}, ""},
		{"an update that removes the token's hash and its Secret's name", withTokenAndSecret(), func(m *macvirtv1alpha1.MacMachine) {
			m.Annotations = nil
		}, ""},
		{"an update that removes only the Secret's name", withTokenAndSecret(), func(m *macvirtv1alpha1.MacMachine) {
			delete(m.Annotations, macvirtv1alpha1.AnnotationAgentSecret)
		}, "metadata.annotations[macvirt.io/agent-secret]"},
		{"an update that removes the hash and points at another Secret", withTokenAndSecret(), func(m *macvirtv1alpha1.MacMachine) {
			delete(m.Annotations, macvirtv1alpha1.AnnotationAgentTokenHash)
			m.Annotations[macvirtv1alpha1.AnnotationAgentSecret] = "someone-elses"
		}, "metadata.annotations[macvirt.io/agent-secret]"},
		{"an owner reference to a pool under a group spelt otherwise", nil, func(m *macvirtv1alpha1.MacMachine) {
			ref := poolRef
			ref.APIVersion = "MACVIRT.IO/v1alpha1"
			m.OwnerReferences = []metav1.OwnerReference{ref}
		}, "metadata.ownerReferences[0]"},
		{"an owner reference to a pool with the group as its only part", nil, func(m *macvirtv1alpha1.MacMachine) {
			ref := poolRef
			ref.APIVersion, ref.Kind = "macvirt.io", "Pool"
			m.OwnerReferences = []metav1.OwnerReference{ref}
		}, "metadata.ownerReferences[0]"},
		{"an update that keeps the pool's owner reference", withOwner(poolRef), func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.Running = ptrTo(false)
		}, ""},
		{"an update that drops the pool's owner reference (the garbage collector orphaning)", withOwner(poolRef), func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences = nil
		}, ""},
		{"an update that points the owner reference at another pool", withOwner(poolRef), func(m *macvirtv1alpha1.MacMachine) {
			m.OwnerReferences[0].UID = "other-pool-uid"
		}, "metadata.ownerReferences[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := minimalMachine()
			if tc.old != nil {
				base = tc.old.DeepCopy()
			}
			m := base.DeepCopy()
			tc.mod(m)
			errs := OperatorOnlyChanges(tc.old, m)
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			expectError(t, errs, tc.field, "only the macvirt operator sets this")
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func withAnnotation(k, v string) *macvirtv1alpha1.MacMachine {
	m := minimalMachine()
	m.Annotations = map[string]string{k: v}
	return m
}

func withTokenAndSecret() *macvirtv1alpha1.MacMachine {
	m := withAnnotation(macvirtv1alpha1.AnnotationAgentTokenHash, "0123")
	m.Annotations[macvirtv1alpha1.AnnotationAgentSecret] = "m-1-agent-0123"
	return m
}

func withOwner(ref metav1.OwnerReference) *macvirtv1alpha1.MacMachine {
	m := minimalMachine()
	m.OwnerReferences = []metav1.OwnerReference{ref}
	return m
}

// shippedRole creates, under a name of its own, the ClusterRole a file of
// config/rbac ships, and binds it to user in ns.
func shippedRole(file, ns, user string) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "rbac", file)) //nolint:gosec // a file of the repository's config/rbac.
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.Unmarshal(raw, role)).To(Succeed())
	role.Name = uniqueName(role.Name)
	role.Labels = nil // aggregation is the controller-manager's, which envtest does not run
	Expect(k8sClient.Create(suiteCtx, role)).To(Succeed())
	cleanup(role)
	Expect(k8sClient.Create(suiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
}

// impersonating is a client that acts as user.
func impersonating(user string) client.Client {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	cl, err := client.New(c, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

var _ = Describe("What binds a machine", func() {
	It("is refused from anyone but the operator, even under the shipped macmachine-admin-role, naming the field", func() {
		ns := newNamespace(nil)
		shippedRole("macmachine_admin_role.yaml", ns, "mallory")
		mallory := impersonating("mallory")
		probe := minimalMachine()
		probe.Namespace, probe.Name = ns, uniqueName("probe")
		// The API server's RBAC learns of the binding through its cache.
		Eventually(func() error { return mallory.Create(suiteCtx, probe.DeepCopy(), client.DryRunAll) }).Should(Succeed())

		pool := &macvirtv1alpha1.MacPool{}
		pool.APIVersion, pool.Kind, pool.Name, pool.UID = "macvirt.io/v1alpha1", "MacPool", "ci", "0b9c2f3e-0000-4000-8000-000000000001"
		for _, tc := range []struct {
			field string
			mod   func(*macvirtv1alpha1.MacMachine)
		}{
			{"spec.claimRef", func(m *macvirtv1alpha1.MacMachine) {
				m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: "team-b", Name: "db", UID: "0b9c2f3e-0000-4000-8000-000000000002"}
			}},
			{"metadata.labels[macvirt.io/pool]", func(m *macvirtv1alpha1.MacMachine) {
				m.Labels = map[string]string{macvirtv1alpha1.LabelPool: "ci"}
			}},
			{"metadata.annotations[macvirt.io/agent-token-sha256]", func(m *macvirtv1alpha1.MacMachine) {
				m.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: "0123"}
			}},
			{"metadata.ownerReferences[0]", func(m *macvirtv1alpha1.MacMachine) {
				m.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(pool, macvirtv1alpha1.GroupVersion.WithKind("MacPool"))}
			}},
		} {
			By("creating a machine that sets " + tc.field)
			m := minimalMachine()
			m.Namespace, m.Name = ns, uniqueName("forged")
			tc.mod(m)
			d := denialOf(mallory.Create(suiteCtx, m))
			Expect(d.byWebhook).To(Equal("vmacmachine-v1alpha1.macvirt.io"))
			Expect(d.fields).To(ConsistOf(tc.field))
			Expect(d.message).To(ContainSubstring("only the macvirt operator sets this"))
		}

		By("a plain machine is admitted; then adding the pool label, or a token, is refused; stopping it is not")
		m := minimalMachine()
		m.Namespace, m.Name = ns, uniqueName("plain")
		Expect(mallory.Create(suiteCtx, m)).To(Succeed())
		labelled := m.DeepCopy()
		labelled.Labels = map[string]string{macvirtv1alpha1.LabelPool: "ci"}
		Expect(denialOf(mallory.Update(suiteCtx, labelled)).fields).To(ConsistOf("metadata.labels[macvirt.io/pool]"))
		tokened := m.DeepCopy()
		tokened.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: "0123"}
		Expect(denialOf(mallory.Update(suiteCtx, tokened)).fields).To(ConsistOf("metadata.annotations[macvirt.io/agent-token-sha256]"))
		m.Spec.Running = ptrTo(false)
		Expect(mallory.Update(suiteCtx, m)).To(Succeed())

		By("the operator writes them")
		m.Labels = map[string]string{macvirtv1alpha1.LabelPool: "ci"}
		m.Annotations = map[string]string{macvirtv1alpha1.AnnotationAgentTokenHash: "0123"}
		m.Spec.ClaimRef = &macvirtv1alpha1.ObjectRef{Namespace: ns, Name: "db", UID: "0b9c2f3e-0000-4000-8000-000000000003"}
		Expect(k8sClient.Update(context.Background(), m)).To(Succeed())
	})
})
