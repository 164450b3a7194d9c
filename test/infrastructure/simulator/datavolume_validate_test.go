/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package simulator

import (
	"testing"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// TestValidateSnapshotCloneLikeCDI pins CDI's words for a restore it
// refuses; a snapshot not yet ready is not refused.
func TestValidateSnapshotCloneLikeCDI(t *testing.T) {
	size := func(q string) *resource.Quantity { return ptr.To(resource.MustParse(q)) }
	snap := func(st *snapshotv1.VolumeSnapshotStatus, class *string) *snapshotv1.VolumeSnapshot {
		return &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"},
			Spec: snapshotv1.VolumeSnapshotSpec{VolumeSnapshotClassName: class}, Status: st}
	}
	cases := map[string]struct {
		snap *snapshotv1.VolumeSnapshot
		dv   *cdiv1.DataVolume
		want string
	}{
		"no status":   {snap(nil, ptr.To("vsc")), storageDV("64Gi"), "no status on source snapshot yet"},
		"in error":    {snap(&snapshotv1.VolumeSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("boom")}}, ptr.To("vsc")), storageDV("64Gi"), "snapshot in error state with msg: boom"},
		"no class":    {snap(&snapshotv1.VolumeSnapshotStatus{}, nil), storageDV("64Gi"), "snapshot snap/ns does not have volume snap class populated, can't clone"},
		"no size yet": {snap(&snapshotv1.VolumeSnapshotStatus{}, ptr.To("vsc")), storageDV("64Gi"), "snapshot has no restore size"},
		"too small": {snap(&snapshotv1.VolumeSnapshotStatus{RestoreSize: size("64Gi")}, ptr.To("vsc")), storageDV("32Gi"),
			"target resources requests storage size is smaller than the source 34359738368 < 68719476736"},
		"not ready, big enough": {snap(&snapshotv1.VolumeSnapshotStatus{RestoreSize: size("64Gi"), ReadyToUse: ptr.To(false)}, ptr.To("vsc")),
			storageDV("64Gi"), ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := validateSnapshotClone(tc.snap, &tc.dv.Spec)
			g := NewWithT(t)
			if tc.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(tc.want))
		})
	}
}

// TestValidatePVCCloneLikeCDI: content types must match; sizes are
// compared for a spec.pvc request or a Block source only.
func TestValidatePVCCloneLikeCDI(t *testing.T) {
	g := NewWithT(t)
	source := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")}}}}
	g.Expect(validatePVCClone(source, &storageDV("32Gi").Spec)).To(Succeed(), "a Filesystem source's size is not compared")
	block := source.DeepCopy()
	block.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	g.Expect(validatePVCClone(block, &storageDV("32Gi").Spec)).To(MatchError(ContainSubstring("smaller than the source")))
	archive := storageDV("64Gi")
	archive.Spec.ContentType = cdiv1.DataVolumeArchive
	g.Expect(validatePVCClone(source, &archive.Spec)).To(MatchError("Source contentType (kubevirt) and target contentType (archive) do not match"))
}
