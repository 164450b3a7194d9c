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

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// TestProfileCloneStrategyFollowsCDI pins reconcileCloneStrategy's order:
// the profile's spec, the class's annotation, the provisioner's advice,
// snapshot with a snapshot class, and copy without one.
func TestProfileCloneStrategyFollowsCDI(t *testing.T) {
	class := func(provisioner string, ann map[string]string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc", Annotations: ann}, Provisioner: provisioner}
	}
	cases := map[string]struct {
		sc        *storagev1.StorageClass
		spec      *cdiv1.CDICloneStrategy
		snapClass string
		want      cdiv1.CDICloneStrategy
	}{
		"no snapshot class: copy":             {sc: class("csi.example.com", nil), want: cdiv1.CloneStrategyHostAssisted},
		"a snapshot class: snapshot":          {sc: class("csi.example.com", nil), snapClass: "vsc", want: cdiv1.CloneStrategySnapshot},
		"advised csi-clone for ceph rbd":      {sc: class("rook-ceph.rbd.csi.ceph.com", nil), want: cdiv1.CloneStrategyCsiClone},
		"advised copy beats a snapshot class": {sc: class("topolvm.io", nil), snapClass: "vsc", want: cdiv1.CloneStrategyHostAssisted},
		"advised snapshot without a snapshot class falls back to copy": {
			sc: class("pd.csi.storage.gke.io", nil), want: cdiv1.CloneStrategyHostAssisted},
		"the class's annotation": {
			sc: class("csi.example.com", map[string]string{annCloneStrategy: "csi-clone"}), snapClass: "vsc", want: cdiv1.CloneStrategyCsiClone},
		"an unknown annotation is the empty strategy": {
			sc: class("csi.example.com", map[string]string{annCloneStrategy: "fast"}), want: ""},
		"the profile's spec first": {
			sc:   class("rook-ceph.rbd.csi.ceph.com", map[string]string{annCloneStrategy: "csi-clone"}),
			spec: ptr.To(cdiv1.CloneStrategyHostAssisted), snapClass: "vsc", want: cdiv1.CloneStrategyHostAssisted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st, err := profileStatus(tc.sc, cdiv1.StorageProfileSpec{CloneStrategy: tc.spec}, tc.snapClass)
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.CloneStrategy).To(HaveValue(Equal(tc.want)))
		})
	}
}

// TestProfileStatusReportsTheClass: the class, its provisioner and
// snapshot class, the claim property sets CDI knows or the spec gives, and
// the DataImportCron source format.
func TestProfileStatusReportsTheClass(t *testing.T) {
	g := NewWithT(t)
	rbd := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "ceph"}, Provisioner: "rook-ceph.rbd.csi.ceph.com"}
	st, err := profileStatus(rbd, cdiv1.StorageProfileSpec{}, "ceph-snap")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.StorageClass).To(HaveValue(Equal("ceph")))
	g.Expect(st.Provisioner).To(HaveValue(Equal("rook-ceph.rbd.csi.ceph.com")))
	g.Expect(st.SnapshotClass).To(HaveValue(Equal("ceph-snap")))
	g.Expect(st.DataImportCronSourceFormat).To(HaveValue(Equal(cdiv1.DataImportCronSourceFormatSnapshot)))
	g.Expect(st.ClaimPropertySets).To(Equal([]cdiv1.ClaimPropertySet{
		claimProps(corev1.ReadWriteMany, corev1.PersistentVolumeBlock),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeBlock),
		claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem),
	}))

	st, err = profileStatus(rbd, cdiv1.StorageProfileSpec{}, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.SnapshotClass).To(BeNil())
	g.Expect(st.DataImportCronSourceFormat).To(HaveValue(Equal(cdiv1.DataImportCronSourceFormatPvc)), "no snapshot class: pvc sources")

	own := []cdiv1.ClaimPropertySet{claimProps(corev1.ReadWriteOnce, corev1.PersistentVolumeFilesystem)}
	st, err = profileStatus(rbd, cdiv1.StorageProfileSpec{ClaimPropertySets: own}, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.ClaimPropertySets).To(Equal(own))

	_, err = profileStatus(rbd, cdiv1.StorageProfileSpec{ClaimPropertySets: []cdiv1.ClaimPropertySet{{AccessModes: own[0].AccessModes}}}, "")
	g.Expect(err).To(MatchError(errIncompleteClaimPropertySet))

	unknown := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "rancher.io/local-path"}
	st, err = profileStatus(unknown, cdiv1.StorageProfileSpec{}, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.ClaimPropertySets).To(BeEmpty())
}
