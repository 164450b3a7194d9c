package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The default tenant (Options.Tenant): a user with a client certificate of
// its own, the shipped claim-editor and runner-set-editor roles in its
// namespace, the catalog cluster-wide, and nothing else (no Secrets:
// kubectl mac reads everything from the claim's status, and reaches the Mac
// through the API server's tunnel). Its kubeconfig is what kubectl mac uses
// in the sandbox.
const (
	TenantUser      = "alice"
	TenantNamespace = "team-ios"
	// TenantClass is a class for the tenant to claim from this machine: the
	// sample class, made on demand, with Screen Sharing, ClusterIP by
	// default (kubectl mac reaches it through the tunnel) and NodePort
	// allowed (the simulated node is this machine, simulator.NodeAddress).
	TenantClass = "ci-sonoma"
)

// tenantRoles are the shipped ClusterRoles the tenant is bound to: in its
// namespace (claims and runner sets) and cluster-wide (the catalog of
// classes and pools).
var tenantRoles = []struct {
	file        string
	clusterWide bool
}{
	{"aggregated_claim_editor_role.yaml", false},
	{"aggregated_runnerset_editor_role.yaml", false},
	{"aggregated_catalog_viewer_role.yaml", true},
}

// SetUpTenant makes user a tenant of ns with the shipped roles.
func SetUpTenant(ctx context.Context, admin client.Client, user, ns string) error {
	if err := createIfMissing(ctx, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	subject := rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}
	for _, r := range tenantRoles {
		objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", r.file), admin.Scheme())
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := createIfMissing(ctx, admin, o); err != nil {
				return err
			}
			ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.GetName()}
			var binding client.Object = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + o.GetName(), Namespace: ns},
				RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
			if r.clusterWide {
				binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + o.GetName()},
					RoleRef: ref, Subjects: []rbacv1.Subject{subject}}
			}
			if err := createIfMissing(ctx, admin, binding); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteTenantKubeconfig writes a kubeconfig for user, authenticated by a
// client certificate of its own, whose context's namespace is ns.
func WriteTenantKubeconfig(env *envtest.Environment, user, ns, path string) error {
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		return err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return err
	}
	if c := cfg.Contexts[cfg.CurrentContext]; c != nil {
		c.Namespace = ns
	}
	if b, err = clientcmd.Write(*cfg); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func createIfMissing(ctx context.Context, c client.Client, o client.Object) error {
	if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
	}
	return nil
}
