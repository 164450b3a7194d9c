package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The ClusterRole generated from the RBAC markers, bound to a service
// account, must allow the graceful stop and cross-namespace clones and must
// not allow reading Secrets cluster-wide; what the operator does only in its
// own namespace comes from the generated Role.
var _ = Describe("The generated ClusterRole", func() {
	var user string
	allowed := func(attrs authorizationv1.ResourceAttributes) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts"}, ResourceAttributes: &attrs}}
		Expect(k8sClient.Create(context.Background(), sar)).To(Succeed())
		return sar.Status.Allowed
	}
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		roles := readObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", "role.yaml"))
		var role *rbacv1.ClusterRole
		for _, obj := range roles {
			if obj.GetKind() == "ClusterRole" {
				role = &rbacv1.ClusterRole{}
				Expect(runtimeConvert(obj.Object, role)).To(Succeed())
			}
		}
		Expect(role).NotTo(BeNil(), "config/rbac/role.yaml has no ClusterRole")
		role.Name = "macvirt-manager-" + ns
		Expect(k8sClient.Create(context.Background(), role)).To(Succeed())
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "macvirt", Namespace: ns}}
		Expect(k8sClient.Create(context.Background(), sa)).To(Succeed())
		Expect(k8sClient.Create(context.Background(), &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
		})).To(Succeed())
		user = "system:serviceaccount:" + ns + ":macvirt"
		// The API server's RBAC authorizer learns of new bindings through
		// its own cache; wait until it grants something the role grants, so
		// a denial below is the role's, not the cache's.
		Eventually(func() bool {
			return allowed(authorizationv1.ResourceAttributes{Namespace: "tenant-a", Verb: "get", Group: "macvirt.io", Resource: "macmachines"})
		}).WithTimeout(timeout).Should(BeTrue())
	})

	It("may stop a VirtualMachine through subresources.kubevirt.io", func() {
		Expect(allowed(authorizationv1.ResourceAttributes{Namespace: "tenant-a", Verb: "update",
			Group: "subresources.kubevirt.io", Resource: "virtualmachines", Subresource: "stop", Name: "mac-1"})).To(BeTrue())
	})

	It("may clone across namespaces (create datavolumes/source)", func() {
		Expect(allowed(authorizationv1.ResourceAttributes{Namespace: "macvirt-images", Verb: "create",
			Group: "cdi.kubevirt.io", Resource: "datavolumes", Subresource: "source"})).To(BeTrue())
	})

	It("may not read Secrets cluster-wide", func() {
		for _, verb := range []string{"get", "list", "watch"} {
			Expect(allowed(authorizationv1.ResourceAttributes{Verb: verb, Resource: "secrets"})).To(BeFalse(), verb)
			Expect(allowed(authorizationv1.ResourceAttributes{Namespace: "tenant-a", Verb: verb, Resource: "secrets"})).To(BeFalse(), verb)
		}
	})

	It("has no wildcard rule", func() {
		data, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "rbac", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Contains(string(data), "'*'") || strings.Contains(string(data), `"*"`) ||
			strings.Contains(string(data), "- *")).To(BeFalse(), "config/rbac/role.yaml grants a wildcard")
	})

	It("keeps class snapshots (controllerrevisions) only in the operator's namespace, through the namespaced Role", func() {
		for _, verb := range []string{"create", "delete"} {
			Expect(allowed(authorizationv1.ResourceAttributes{Namespace: "tenant-a", Verb: verb, Group: "apps", Resource: "controllerrevisions"})).To(BeFalse(), verb)
			Expect(allowed(authorizationv1.ResourceAttributes{Verb: verb, Group: "apps", Resource: "controllerrevisions"})).To(BeFalse(), verb)
		}
		// The Role is installed in the operator's namespace; here, in this test's.
		var role *rbacv1.Role
		for _, obj := range readObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", "role.yaml")) {
			if obj.GetKind() == "Role" {
				role = &rbacv1.Role{}
				Expect(runtimeConvert(obj.Object, role)).To(Succeed())
			}
		}
		Expect(role).NotTo(BeNil(), "config/rbac/role.yaml has no Role")
		role.Namespace = ns
		Expect(k8sClient.Create(context.Background(), role)).To(Succeed())
		Expect(k8sClient.Create(context.Background(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "macvirt", Namespace: ns}},
		})).To(Succeed())
		for _, verb := range []string{"get", "list", "watch", "create", "delete"} {
			Eventually(func() bool {
				return allowed(authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "apps", Resource: "controllerrevisions"})
			}).WithTimeout(timeout).Should(BeTrue(), verb)
		}
		Expect(allowed(authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "apps", Resource: "controllerrevisions"})).To(
			BeFalse(), "snapshots are replaced, never edited")
	})
})
