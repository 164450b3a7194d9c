package harness

import (
	"fmt"
	"path/filepath"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/internal/operator"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The operator's service account, as config/default names it, and the
// namespace config/default puts config/tunnel's Role in (where the API
// server publishes its front proxy's CA).
const (
	OperatorServiceAccount = "macvirt-controller-manager"
	trustNamespace         = "kube-system"
	tunnelTrustReader      = "tunnel/auth_reader_role.yaml"
)

// OperatorUser is who the operator's requests arrive as when it runs as its
// service account (Options.OperatorAccount).
var OperatorUser = "system:serviceaccount:" + operator.DefaultNamespace + ":" + OperatorServiceAccount

// operatorAccount gives the operator's service account the shipped roles,
// as the install does, waits until the API server's authorizer knows the
// bindings, and returns a connection that acts as that account.
func (w *World) operatorAccount() (*rest.Config, error) {
	ctx, admin := w.Ctx, w.Admin
	if err := createIfMissing(ctx, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operator.DefaultNamespace}}); err != nil {
		return nil, err
	}
	if err := createIfMissing(ctx, admin, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Name: OperatorServiceAccount, Namespace: operator.DefaultNamespace}}); err != nil {
		return nil, err
	}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: operator.DefaultNamespace}
	for _, file := range []string{filepath.Join("rbac", "role.yaml"), tunnelTrustReader} {
		objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", file), w.Scheme)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			var binding client.Object
			switch role := obj.(type) {
			case *rbacv1.ClusterRole:
				binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: []rbacv1.Subject{sa}}
			case *rbacv1.Role:
				if file == tunnelTrustReader {
					role.Namespace = trustNamespace // as config/default places it
				}
				binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: []rbacv1.Subject{sa}}
			default:
				continue
			}
			if err := admin.Create(ctx, obj); err != nil {
				return nil, fmt.Errorf("creating %T %s from config/%s: %w", obj, obj.GetName(), file, err)
			}
			if err := admin.Create(ctx, binding); err != nil {
				return nil, fmt.Errorf("binding %s to the operator: %w", obj.GetName(), err)
			}
		}
	}
	w.operatorUser = OperatorUser
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + operator.DefaultNamespace, "system:authenticated"}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Group: "macvirt.io", Resource: "macmachines"},
		{Verb: "get", Resource: "configmaps", Namespace: trustNamespace, Name: "extension-apiserver-authentication"},
	} {
		if err := waitAllowed(w, OperatorUser, groups, attrs); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(w.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: OperatorUser, Groups: groups}
	return cfg, nil
}

// waitAllowed waits, a minute at most, until the API server's authorizer
// allows user what attrs say: its RBAC cache learns of new bindings a
// moment after they are made.
func waitAllowed(w *World, user string, groups []string, attrs authorizationv1.ResourceAttributes) error {
	deadline := time.Now().Add(time.Minute)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups, ResourceAttributes: &attrs}}
		if err := w.Admin.Create(w.Ctx, sar); err != nil {
			return err
		}
		if sar.Status.Allowed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is still not allowed %+v: %s", user, attrs, sar.Status.Reason)
		}
		select {
		case <-w.Ctx.Done():
			return w.Ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LetOperatorReadSecrets does what an admin of namespace ns does for
// bootstraps and runner sets that name its Secrets, when the operator runs
// as its service account (Options.OperatorAccount): binds the shipped
// ClusterRole config/rbac/bootstrap_source_reader_role.yaml to it there.
func (w *World) LetOperatorReadSecrets(ns string) error {
	objs, err := ReadObjects(filepath.Join(cluster.RepoRoot(), "config", "rbac", "bootstrap_source_reader_role.yaml"), w.Scheme)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		role, ok := obj.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		role.Name = "macvirt-" + role.Name // as config/default names it
		if err := createIfMissing(w.Ctx, w.Admin, role); err != nil {
			return err
		}
		sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: operator.DefaultNamespace}
		if err := w.Admin.Create(w.Ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: []rbacv1.Subject{sa}}); err != nil {
			return err
		}
	}
	return nil
}
