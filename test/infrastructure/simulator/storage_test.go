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

package simulator_test

import (
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// describeClaim is a PVC's phase.
func describeClaim(pvc *corev1.PersistentVolumeClaim) string { return string(pvc.Status.Phase) }

// profile polls the StorageProfile of a class.
func profile(name string) func(Gomega) cdiv1.StorageProfileStatus {
	return func(g Gomega) cdiv1.StorageProfileStatus {
		sp := &cdiv1.StorageProfile{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: name}, sp)).To(Succeed())
		return sp.Status
	}
}

// warnings lists the reasons of the Warning events about an object.
func warnings(ns, name string) func(Gomega) []string {
	return func(g Gomega) []string {
		evs := &corev1.EventList{}
		g.Expect(k8sClient.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Type == corev1.EventTypeWarning {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}
}

// tolerance absorbs the watch's delay in the timing specs.
const tolerance = 50 * time.Millisecond

var _ = Describe("Storage", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("creates a DataVolume's PVC, owned by it with CDI's labels and annotations, and binds it once the DataVolume is bound", func() {
		seen := record(&corev1.PersistentVolumeClaimList{}, ns, describeClaim)
		create(newDataVolume(ns, "disk"))
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))

		dv, err := getDataVolume(ns, "disk")
		Expect(err).NotTo(HaveOccurred())
		pvc := getClaim(ns, "disk")
		Expect(metav1.IsControlledBy(pvc, dv)).To(BeTrue())
		Expect(pvc.Labels).To(HaveKeyWithValue("app", "containerized-data-importer"))
		Expect(pvc.Annotations).To(And(
			HaveKeyWithValue("cdi.kubevirt.io/createdForDataVolume", string(dv.UID)),
			HaveKeyWithValue("cdi.kubevirt.io/storage.contentType", "kubevirt"),
			HaveKeyWithValue("cdi.kubevirt.io/storage.import.endpoint", "https://images.example.com/macos-sequoia.qcow2"),
		))
		Expect(pvc.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}))
		// 64 GiB and CDI's 6 % filesystem overhead.
		Expect(pvc.Spec.Resources.Requests.Storage().Value()).To(Equal(int64(72842645341)))
		Expect(pvc.Status.Capacity.Storage().Value()).To(Equal(int64(72842645341)))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{"Pending", "Bound"}))
		Expect(volumeFiles(pvc.UID)).To(ConsistOf(goldenFile), "an import holds the golden image")
	})

	It("renders a PVC's access and volume modes from its class's StorageProfile", func() {
		class := storageClass("rook-ceph.rbd.csi.ceph.com")
		create(withClass(newDataVolume(ns, "disk"), class))
		Eventually(claimPhase(ns, "disk")).WithTimeout(timeout).Should(Equal(corev1.ClaimBound))

		pvc := getClaim(ns, "disk")
		Expect(pvc.Spec.StorageClassName).To(HaveValue(Equal(class)))
		Expect(pvc.Spec.AccessModes).To(Equal([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}))
		Expect(pvc.Spec.VolumeMode).To(HaveValue(Equal(corev1.PersistentVolumeBlock)))
		Expect(pvc.Spec.Resources.Requests.Storage().Value()).To(Equal(int64(64<<30)), "no filesystem overhead on Block")
	})

	It("keeps a StorageProfile per StorageClass with CDI's clone strategy, and removes it with its class", func() {
		plain := storageClass("plain.csi.example.com")
		rbd := storageClass("rook-ceph.rbd.csi.ceph.com")
		Eventually(profile(plain)).WithTimeout(timeout).Should(And(
			HaveField("StorageClass", HaveValue(Equal(plain))),
			HaveField("Provisioner", HaveValue(Equal("plain.csi.example.com"))),
			HaveField("CloneStrategy", HaveValue(Equal(cdiv1.CloneStrategyHostAssisted))),
			HaveField("DataImportCronSourceFormat", HaveValue(Equal(cdiv1.DataImportCronSourceFormatPvc))),
			HaveField("SnapshotClass", BeNil()),
			HaveField("ClaimPropertySets", BeEmpty()),
		))
		Eventually(profile(rbd)).WithTimeout(timeout).Should(And(
			HaveField("CloneStrategy", HaveValue(Equal(cdiv1.CloneStrategyCsiClone))),
			HaveField("ClaimPropertySets", HaveLen(3)),
		))

		vsc := snapshotClass("plain.csi.example.com")
		Eventually(profile(plain)).WithTimeout(timeout).Should(And(
			HaveField("CloneStrategy", HaveValue(Equal(cdiv1.CloneStrategySnapshot))),
			HaveField("SnapshotClass", HaveValue(Equal(vsc))),
		))

		Expect(k8sClient.Delete(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: plain}})).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, types.NamespacedName{Name: plain}, &cdiv1.StorageProfile{})
		}).WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
	})

	It("clones by snapshot on a class with a CSI driver and a snapshot class, reporting cloneType snapshot, in the snapshot duration", func() {
		class := snapshotStorage("snap.csi.example.com")
		classPVC(ns, "golden", class)
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		clock := clockPhases(ns, "clone")
		create(withClass(pvcClone(ns, "golden"), class))

		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{
			" ", "Pending N/A", "CloneScheduled N/A", "SnapshotForSmartCloneInProgress N/A", "CloneFromSnapshotSourceInProgress N/A",
			"PrepClaimInProgress N/A", "RebindInProgress N/A", "Succeeded 100.0%",
		}))
		dv, err := getDataVolume(ns, "clone")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Annotations).To(HaveKeyWithValue(simulator.AnnCloneType, "snapshot"))
		Expect(getClaim(ns, "clone").Annotations).To(HaveKeyWithValue(simulator.AnnCloneType, "snapshot"))
		Expect(clock.between(cdiv1.SnapshotForSmartCloneInProgress, cdiv1.Succeeded)).To(BeNumerically(">=", snapshotClone-tolerance))
	})

	It("clones by copy on a class without a CSI driver, reporting cloneType copy and why, in time proportional to the size", func() {
		class := storageClass("plain.csi.example.com")
		classPVC(ns, "golden", class)
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		clock := clockPhases(ns, "clone")
		create(withClass(pvcClone(ns, "golden"), class))

		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{
			" ", "Pending N/A", "CloneScheduled N/A", "CloneInProgress 0.00%", "CloneInProgress 25.00%",
			"CloneInProgress 50.00%", "CloneInProgress 75.00%", "Succeeded 100.0%",
		}))
		dv, err := getDataVolume(ns, "clone")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Annotations).To(HaveKeyWithValue(simulator.AnnCloneType, "copy"))
		Expect(getClaim(ns, "clone").Annotations).To(And(
			HaveKeyWithValue(simulator.AnnCloneType, "copy"),
			HaveKeyWithValue("cdi.kubevirt.io/cloneFallbackReason", "In tree storage class does not support snapshot/clone"),
		))
		Eventually(warnings(ns, "clone")).WithTimeout(timeout).Should(ContainElement("NoPopulator"))
		Expect(clock.between(cdiv1.CloneInProgress, cdiv1.Succeeded)).To(BeNumerically(">=", 64*copyPerGiB-tolerance))
	})

	It("falls back to a populator copy when the snapshot clone would need to grow a volume its class cannot", func() {
		driver := "rigid.csi.example.com"
		csiDriver(driver)
		snapshotClass(driver)
		class := storageClass(driver)
		classPVC(ns, "golden", class)
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		create(withClass(pvcClone(ns, "golden"), class))

		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Expect(seen.Seen()).To(ContainElements("CloneInProgress 75.00%", "RebindInProgress 100.0%"))
		Expect(getClaim(ns, "clone").Annotations).To(And(
			HaveKeyWithValue(simulator.AnnCloneType, "copy"),
			HaveKeyWithValue("cdi.kubevirt.io/cloneFallbackReason", "No volume expansion is possible"),
		))
		Eventually(warnings(ns, "clone")).WithTimeout(timeout).Should(ContainElement("NoVolumeExpansion"))
	})

	It("snapshots a PVC: readyToUse with the PVC's size to restore, its content bound; deleting it deletes the content", func() {
		class := snapshotStorage("snap.csi.example.com")
		classPVC(ns, "disk", class)
		volumeSnapshot(ns, "snap")

		Eventually(snapshotReady(ns, "snap")).WithTimeout(timeout).Should(BeTrue())
		snap := getSnapshot(Default, ns, "snap")
		Expect(snap.Spec.VolumeSnapshotClassName).NotTo(BeNil(), "the controller sets the default class")
		Expect(snap.Status.RestoreSize.Value()).To(Equal(int64(64 << 30)))
		Expect(snap.Status.CreationTime).NotTo(BeNil())
		Expect(snap.Status.BoundVolumeSnapshotContentName).To(HaveValue(Equal("snapcontent-" + string(snap.UID))))
		content := &snapshotv1.VolumeSnapshotContent{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: *snap.Status.BoundVolumeSnapshotContentName}, content)).To(Succeed())
		Expect(content.Spec.Driver).To(Equal("snap.csi.example.com"))
		Expect(content.Spec.DeletionPolicy).To(Equal(snapshotv1.VolumeSnapshotContentDelete))
		Expect(content.Status.ReadyToUse).To(HaveValue(BeTrue()))

		Expect(k8sClient.Delete(ctx, snap)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, types.NamespacedName{Name: content.Name}, &snapshotv1.VolumeSnapshotContent{})
		}).WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
	})

	It("sets the snapshot controller's error on a snapshot whose PVC's driver has no snapshot class", func() {
		classPVC(ns, "disk", storageClass("plain.csi.example.com"))
		volumeSnapshot(ns, "snap")
		Eventually(func(g Gomega) string {
			st := getSnapshot(g, ns, "snap").Status
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Error).NotTo(BeNil())
			return *st.Error.Message
		}).WithTimeout(timeout).Should(Equal("Failed to set default snapshot class with error cannot find default snapshot class"))
		Consistently(snapshotReady(ns, "snap")).WithTimeout(3 * snapshotDelay).Should(BeFalse())
	})

	It("restores a DataVolume from a VolumeSnapshot by snapshot, holding what the PVC held when the snapshot was cut", func() {
		class := snapshotStorage("snap.csi.example.com")
		disk := classPVC(ns, "disk", class)
		writeFile(disk.UID, "Users/admin/before.txt", "before")
		volumeSnapshot(ns, "snap")
		Eventually(snapshotReady(ns, "snap")).WithTimeout(timeout).Should(BeTrue())
		writeFile(disk.UID, "Users/admin/after.txt", "after")
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		create(withClass(restoredDataVolume(ns, "restored", "snap"), class))

		Eventually(dataVolumePhase(ns, "restored")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{
			" ", "Pending N/A", "CloneScheduled N/A", "CloneFromSnapshotSourceInProgress N/A", "PrepClaimInProgress N/A",
			"RebindInProgress N/A", "Succeeded 100.0%",
		}))
		restored := getClaim(ns, "restored")
		Expect(restored.Annotations).To(HaveKeyWithValue(simulator.AnnCloneType, "snapshot"))
		Expect(volumeFiles(restored.UID)).To(ConsistOf(goldenFile, "Users/admin/before.txt"))
	})

	It("holds a clone from a DataSource's snapshot with CloneWithoutSource until the snapshot exists", func() {
		class := snapshotStorage("rbd.csi.example.com")
		ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sequoia"}}
		ds.Spec.Source.Snapshot = &cdiv1.DataVolumeSourceSnapshot{Namespace: ns, Name: "sequoia-snap"}
		create(ds)
		create(withClass(newClonedDataVolume(ns, "clone", "sequoia"), class))
		Eventually(dataSourceReady(ns, "sequoia")).WithTimeout(timeout).Should(Equal("False NotFound: Snapshot not found"))
		Eventually(func(g Gomega) []cdiv1.DataVolumeCondition {
			dv, err := getDataVolume(ns, "clone")
			g.Expect(err).NotTo(HaveOccurred())
			return dv.Status.Conditions
		}).WithTimeout(timeout).Should(ContainElement(And(HaveField("Type", cdiv1.DataVolumeBound),
			HaveField("Reason", "CloneWithoutSource"), HaveField("Message", "The source snapshot sequoia-snap doesn't exist"))))

		classPVC(ns, "disk", class)
		volumeSnapshot(ns, "sequoia-snap")
		Eventually(dataSourceReady(ns, "sequoia")).WithTimeout(timeout).Should(Equal("True Ready: DataSource is ready to be consumed"))
		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Expect(getClaim(ns, "clone").Annotations).To(HaveKeyWithValue(simulator.AnnCloneType, "snapshot"))
	})

	It("copies what the source PVC holds into its clone", func() {
		goldenImage(ns, "sequoia")
		source := getClaim(ns, "sequoia")
		writeFile(source.UID, "Users/admin/actions-runner/.runner", "registered")
		create(newClonedDataVolume(ns, "clone", "sequoia"))

		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		target := getClaim(ns, "clone")
		Expect(readFile(target.UID, "Users/admin/actions-runner/.runner")).To(Equal("registered"))
		Expect(volumeFiles(target.UID)).To(ContainElement(goldenFile))
	})

	It("holds a clone in CloneScheduled while a running VM uses its source PVC, with CloneSourceInUse on the target PVC", func() {
		importedDataVolume(ns, "disk")
		create(newVM(ns, "mac", "disk"))
		Eventually(vmiPhase(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.Running))
		create(pvcClone(ns, "disk"))
		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.CloneScheduled))
		Consistently(dataVolumePhase(ns, "clone")).WithTimeout(6 * stepInterval).Should(Equal(cdiv1.CloneScheduled))
		Eventually(warnings(ns, "clone")).WithTimeout(timeout).Should(ContainElement("CloneSourceInUse"))

		Eventually(func() error {
			vm, err := getVM(ns, "mac")
			if err != nil {
				return err
			}
			vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
			return k8sClient.Update(ctx, vm)
		}).WithTimeout(timeout).Should(Succeed())
		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})

	It("leaves a blank DataVolume's volume empty", func() {
		dv := newDataVolume(ns, "blank")
		dv.Spec.Source = &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}
		create(dv)
		Eventually(dataVolumePhase(ns, "blank")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Expect(volumeFiles(getClaim(ns, "blank").UID)).To(BeEmpty())
	})

	It("deletes the PVC of a deleted DataVolume once no instance uses it", func() {
		importedDataVolume(ns, "disk")
		dv, err := getDataVolume(ns, "disk")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Delete(ctx, dv)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "disk"}, &corev1.PersistentVolumeClaim{})
		}).WithTimeout(timeout).Should(Satisfy(apierrors.IsNotFound))
	})

	It("binds a PVC of an Immediate class at once and leaves one of a WaitForFirstConsumer class Pending", func() {
		classPVC(ns, "now", storageClass("plain.csi.example.com"))
		later := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(wffcStorageClass()),
				Resources:        getClaim(ns, "now").Spec.Resources,
			},
		}
		create(later)
		Consistently(claimPhase(ns, "later")).WithTimeout(4 * stepInterval).Should(Equal(corev1.ClaimPending))
	})
})
