package base

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnCloneType is the annotation CDI puts on a cloned DataVolume and its
// PVC, naming the clone strategy it used: snapshot, csi-clone or copy
// (pkg/controller/common/util.go, AnnCloneType).
const AnnCloneType = "cdi.kubevirt.io/cloneType"

// annDefaultStorageClass marks the cluster's default StorageClass.
const annDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"

// DataVolumeReadyAt is when CDI marked the DataVolume Ready; nil before.
func DataVolumeReadyAt(dv *cdiv1.DataVolume) *metav1.Time {
	for i := range dv.Status.Conditions {
		c := &dv.Status.Conditions[i]
		if c.Type == cdiv1.DataVolumeReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return &c.LastTransitionTime
		}
	}
	return nil
}

// DefaultStorageClass is the cluster's default StorageClass, nil when
// there is none.
func DefaultStorageClass(ctx context.Context, c client.Reader) (*storagev1.StorageClass, error) {
	var list storagev1.StorageClassList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing StorageClasses for the default: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].Annotations[annDefaultStorageClass] == "true" {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}
