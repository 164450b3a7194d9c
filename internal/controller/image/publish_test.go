package image

import (
	"context"
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/controllertest"
)

// An image's DataSource names its copy's PVC until the copy is snapshotted,
// then the snapshot: the published DataSource is updated, not made again.
func TestAnImagesDataSourceFollowsItsSnapshot(t *testing.T) {
	ctx := context.Background()
	scheme := controllertest.Scheme(t)
	if err := cdiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r := &Reconciler{Client: c, ImagesNamespace: "imgs"}
	s := &imageScope{Image: &macvirtv1alpha1.MacImage{ObjectMeta: metav1.ObjectMeta{Name: "xcode", UID: "img-uid"}}}
	if _, err := r.ensureDataSource(ctx, s); err != nil {
		t.Fatal(err)
	}
	ds := &cdiv1.DataSource{}
	key := types.NamespacedName{Namespace: "imgs", Name: "xcode"}
	if err := c.Get(ctx, key, ds); err != nil || ds.Spec.Source.PVC == nil {
		t.Fatalf("first published: %v %+v; want the copy's PVC", err, ds.Spec.Source)
	}
	uid := ds.UID
	s.Snapshot = &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "imgs", Name: "xcode"}}
	if _, err := r.ensureDataSource(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, ds); err != nil || ds.Spec.Source.Snapshot == nil || ds.Spec.Source.PVC != nil || ds.UID != uid {
		t.Errorf("once snapshotted: %v %+v (UID %s, was %s); want the same DataSource naming the snapshot", err, ds.Spec.Source, ds.UID, uid)
	}
}
