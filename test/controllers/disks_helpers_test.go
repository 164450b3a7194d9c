package controllers_test

import (
	"context"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// goldenImages creates, in ns, a source PVC and a DataSource pointing at it
// for each name, as a cluster's golden images are: the simulated CDI, like
// CDI, clones only from a DataSource whose source PVC exists. The namespace
// is created if missing.
func goldenImages(ns string, names ...string) {
	ctx := context.Background()
	err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	for _, name := range names {
		sourcePVC(ns, name)
		Expect(k8sClient.Create(ctx, dataSourceOf(ns, name))).To(Succeed())
	}
}

// sourcePVC creates the PVC a golden image's DataSource points at.
func sourcePVC(ns, name string) {
	Expect(k8sClient.Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")},
			},
		},
	})).To(Succeed())
}

// dataSourceOf is a DataSource whose source is the PVC of the same name.
func dataSourceOf(ns, name string) *cdiv1.DataSource {
	return &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: name}}}}
}
