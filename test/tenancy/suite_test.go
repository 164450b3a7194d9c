// Package tenancy_test plays two tenants and an attacker against the whole
// of macvirt (the operator with its webhooks and agent endpoint, running as
// its service account under the shipped RBAC, against the KubeVirt and CDI
// simulator), each tenant with the shipped roles only, through impersonated
// clients. Every attempt to cross a tenant's boundary must be refused or
// harmless, and the suite fails if a shipped role ever grants one.
package tenancy_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/harness"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The suite's world: macvirt at work, its operator running as its service
// account under the shipped RBAC with every request recorded
// (rights_test.go), with the tunnel and the simulated network, and the
// samples applied with two idle machines.
var (
	world  *harness.World
	cfg    *rest.Config
	scheme *runtime.Scheme
	admin  client.Client
	system *harness.System
	// logs is everything the operator, the simulator and the guests logged.
	logs syncBuffer
)

// syncBuffer is a bytes.Buffer many goroutines write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The operator's service account and the user its requests arrive as.
const (
	operatorSA   = harness.OperatorServiceAccount
	operatorUser = "system:serviceaccount:" + operator.DefaultNamespace + ":" + operatorSA
)

// The players: two tenants and an attacker, each in a namespace of their own.
var tenants = map[string]string{"alice": "team-a", "bob": "team-b", "mallory": "evil"}

func TestTenancy(t *testing.T) {
	cluster.NeedsAPIServer(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "Tenancy Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(2 * time.Minute)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	By("macvirt, the simulator and the samples, the operator as its service account with the shipped config/rbac/role.yaml " +
		"and config/tunnel's Role in kube-system, to read the API server's front-proxy trust")
	world = harness.ForTest(GinkgoT(), harness.Options{Log: io.MultiWriter(GinkgoWriter, &logs),
		System:          &harness.SystemOptions{Speed: 4, Network: true},
		OperatorAccount: true, OperatorConnection: recordCalls, // compared with the shipped roles once the suite is over (rights_test.go)
		Samples: &harness.SampleOptions{Machines: 2}})
	cfg, scheme, admin, system = world.Config, world.Scheme, world.Admin, world.System
	Expect(system.OperatorUser).To(Equal(operatorUser))
	ctx := world.Ctx

	By("each player gets every shipped tenant-facing role in their namespace, and the catalog cluster-wide")
	for _, file := range tenantRoleFiles() {
		for _, obj := range shipped(file) {
			Expect(admin.Create(ctx, obj)).To(Succeed())
		}
	}
	for user, ns := range tenants {
		Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		for _, file := range tenantRoleFiles() {
			for _, obj := range shipped(file) {
				name := obj.GetName()
				Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + name, Namespace: ns},
					RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
					Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
			}
		}
		// What a platform gives a team besides macvirt's roles (the
		// built-in edit role would): its own namespace's Secrets.
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "secrets", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-secrets", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "secrets"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
	}
	Expect(admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "catalog"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "catalog-viewer"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:authenticated"}}})).To(Succeed())
	for user, ns := range tenants {
		Eventually(func() bool {
			return allowed(user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "macvirt.io", Resource: "macclaims"}) &&
				allowed(user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}) &&
				allowed(user, authorizationv1.ResourceAttributes{Verb: "list", Group: "macvirt.io", Resource: "macclasses"})
		}).Should(BeTrue(), "the API server's RBAC cache learns of %s's bindings", user)
	}
})

// tenantRoleFiles are the ClusterRoles config/rbac ships for people: all of
// them but the operator's own, the metrics endpoint's, the one namespaces
// bind to the operator for bootstraps, the one an admin binds to it for
// the plugin-sidecar transport, and the host agents' (hostagent_test.go).
func tenantRoleFiles() []string {
	entries, err := os.ReadDir(filepath.Join(cluster.RepoRoot(), "config", "rbac"))
	Expect(err).NotTo(HaveOccurred())
	var files []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, "_role.yaml") || strings.HasPrefix(name, "leader_election") || strings.HasPrefix(name, "metrics_") ||
			strings.HasPrefix(name, "bootstrap_") || strings.HasPrefix(name, "domain_hook_") || strings.HasPrefix(name, "host_agent_") {
			continue
		}
		files = append(files, name)
	}
	Expect(files).To(ContainElements("aggregated_claim_editor_role.yaml", "aggregated_viewer_role.yaml", "macmachine_admin_role.yaml"))
	return files
}

// shipped reads the RBAC objects of a file in config/rbac.
// tunnelTrustReader is the tunnel's Role (config/tunnel, beside config/rbac),
// which config/default puts in trustNamespace.
const (
	tunnelTrustReader = "../tunnel/auth_reader_role.yaml"
	trustNamespace    = "kube-system"
)

// shipped reads the roles of a file of config/rbac (or, for
// tunnelTrustReader, of config/tunnel).
func shipped(file string) []client.Object {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "rbac", file)) //nolint:gosec // a file of the repository's config/rbac.
	Expect(err).NotTo(HaveOccurred())
	var out []client.Object
	for _, doc := range strings.Split(string(raw), "\n---") {
		var meta metav1.TypeMeta
		Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed())
		switch meta.Kind {
		case "ClusterRole":
			r := &rbacv1.ClusterRole{}
			Expect(yaml.Unmarshal([]byte(doc), r)).To(Succeed())
			out = append(out, r)
		case "Role":
			r := &rbacv1.Role{}
			Expect(yaml.Unmarshal([]byte(doc), r)).To(Succeed())
			out = append(out, r)
		}
	}
	return out
}

// configAs is a connection that acts as user.
func configAs(user string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return c
}

// allowed asks the API server whether user may do what attrs say.
func allowed(user string, attrs authorizationv1.ResourceAttributes) bool {
	groups := []string{"system:authenticated"}
	if strings.HasPrefix(user, "system:serviceaccount:") {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+strings.Split(user, ":")[2])
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: &attrs}}
	Expect(admin.Create(context.Background(), sar)).To(Succeed())
	return sar.Status.Allowed
}

// as is a client that acts as user.
func as(user string) client.Client {
	cl, err := client.New(configAs(user), client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}
