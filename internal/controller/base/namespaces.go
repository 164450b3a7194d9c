package base

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=create

// AnnotationCreatedFor says, on a namespace macvirt created, what needed
// it (the images namespace, a pool).
const AnnotationCreatedFor = "macvirt.io/created-for"

// CreateNamespace creates the namespace name when it is missing, as the
// install's part: macvirt gives it no owner and never deletes it, so
// uninstalling macvirt (kubectl delete -k, helm uninstall) leaves the golden
// images and Macs in it alone. created is false when it existed.
func CreateNamespace(ctx context.Context, c client.Client, name, createdFor string) (created bool, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{"app.kubernetes.io/managed-by": "macvirt"},
		Annotations: map[string]string{AnnotationCreatedFor: createdFor}}}
	switch err := c.Create(ctx, ns); {
	case err == nil:
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil
	default:
		return false, err
	}
}
