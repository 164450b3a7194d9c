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
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deleteAfter deletes a cluster-scoped fixture when the spec ends.
func deleteAfter(obj client.Object) {
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed()) })
}

// storageClass creates a StorageClass of provisioner with Immediate
// binding, deleted when the spec ends; mutate adjusts it first.
func storageClass(provisioner string, mutate ...func(*storagev1.StorageClass)) string {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{GenerateName: "sim-"},
		Provisioner:       provisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}
	for _, m := range mutate {
		m(sc)
	}
	create(sc)
	deleteAfter(sc)
	return sc.Name
}

// expandable lets a class's volumes grow.
func expandable(sc *storagev1.StorageClass) { sc.AllowVolumeExpansion = ptr.To(true) }

// csiDriver registers a CSI driver, which makes CDI fill its classes' PVCs
// with its populators.
func csiDriver(name string) {
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}}
	create(d)
	deleteAfter(d)
}

// snapshotClass creates the default VolumeSnapshotClass of driver.
func snapshotClass(driver string) string {
	vsc := &snapshotv1.VolumeSnapshotClass{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "sim-snap-", Annotations: map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}},
		Driver:         driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}
	create(vsc)
	deleteAfter(vsc)
	return vsc.Name
}

// snapshotStorage is a CSI driver with a default snapshot class and an
// expandable class of its own: CDI clones there by snapshot.
func snapshotStorage(driver string) (class string) {
	csiDriver(driver)
	snapshotClass(driver)
	return storageClass(driver, expandable)
}

// classPVC creates a 64Gi PVC of class for a clone or a snapshot, and
// waits for the provisioner to bind it.
func classPVC(ns, name, class string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")},
			},
		},
	}
	create(pvc)
	EventuallyWithOffset(1, claimPhase(ns, name)).WithTimeout(timeout).Should(Equal(corev1.ClaimBound))
	return getClaim(ns, name)
}

func getClaim(ns, name string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{}
	ExpectWithOffset(1, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc)).To(Succeed())
	return pvc
}

// claimPhase polls a PVC's phase.
func claimPhase(ns, name string) func(Gomega) corev1.PersistentVolumeClaimPhase {
	return func(g Gomega) corev1.PersistentVolumeClaimPhase {
		pvc := &corev1.PersistentVolumeClaim{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc)).To(Succeed())
		return pvc.Status.Phase
	}
}

// withClass puts a DataVolume on a storage class.
func withClass(dv *cdiv1.DataVolume, class string) *cdiv1.DataVolume {
	dv.Spec.Storage.StorageClassName = ptr.To(class)
	return dv
}

// restoredDataVolume builds a DataVolume restored from a VolumeSnapshot.
func restoredDataVolume(ns, name, snapshot string) *cdiv1.DataVolume {
	dv := newDataVolume(ns, name)
	dv.Spec.Source = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: ns, Name: snapshot}}
	return dv
}

// pvcClone builds the DataVolume "clone", cloned from a PVC.
func pvcClone(ns, pvc string) *cdiv1.DataVolume {
	dv := newDataVolume(ns, "clone")
	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: pvc}}
	return dv
}

// volumeSnapshot creates a VolumeSnapshot of the PVC "disk" with the
// default class.
func volumeSnapshot(ns, name string) {
	const pvc = "disk"
	create(&snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(pvc)}},
	})
}

func getSnapshot(g Gomega, ns, name string) *snapshotv1.VolumeSnapshot {
	snap := &snapshotv1.VolumeSnapshot{}
	g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, snap)).To(Succeed())
	return snap
}

// snapshotReady polls whether a VolumeSnapshot is readyToUse.
func snapshotReady(ns, name string) func(Gomega) bool {
	return func(g Gomega) bool {
		st := getSnapshot(g, ns, name).Status
		return st != nil && st.ReadyToUse != nil && *st.ReadyToUse
	}
}

// phaseClock records when a DataVolume first entered each phase.
type phaseClock struct {
	mu    sync.Mutex
	since map[cdiv1.DataVolumePhase]time.Time
}

// clockPhases watches the DataVolumes of ns until the spec ends.
func clockPhases(ns, name string) *phaseClock {
	w, err := k8sClient.Watch(ctx, &cdiv1.DataVolumeList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	c := &phaseClock{since: map[cdiv1.DataVolumePhase]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			if dv, ok := ev.Object.(*cdiv1.DataVolume); ok && dv.Name == name {
				c.mu.Lock()
				if _, seen := c.since[dv.Status.Phase]; !seen {
					c.since[dv.Status.Phase] = time.Now()
				}
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// between is the time from entering phase from to entering phase to.
func (c *phaseClock) between(from, to cdiv1.DataVolumePhase) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.since[to].Sub(c.since[from])
}

// files lists the regular files under dir by path relative to it.
func files(dir string) []string {
	var out []string
	ExpectWithOffset(1, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, rel)
		return err
	})).To(Succeed())
	return out
}

// writeFile writes a file into a volume's directory.
func writeFile(uid types.UID, path, content string) {
	dir, err := sim.VolumeDir(uid)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	p := filepath.Join(dir, path)
	ExpectWithOffset(1, os.MkdirAll(filepath.Dir(p), 0o750)).To(Succeed())
	ExpectWithOffset(1, os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
}

// volumeFiles lists what a volume holds.
func volumeFiles(uid types.UID) []string {
	dir, err := sim.VolumeDir(uid)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return files(dir)
}

// readFile reads a file of a volume.
func readFile(uid types.UID, path string) string {
	dir, err := sim.VolumeDir(uid)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	b, err := fs.ReadFile(os.DirFS(dir), path)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(b)
}
