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
	"crypto/sha256"
	"encoding/hex"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// The cron of these specs, the registry URL it imports and the DataSource
// it manages.
const (
	cronName   = "macos"
	macOSImage = "docker://quay.io/macvirt/macos:15"
	goldenDS   = "macos-15"
)

// digestOf is the registry digest of a build of the image.
func digestOf(build string) string {
	sum := sha256.Sum256([]byte(build))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// importOf is the name CDI gives the import of a build for goldenDS.
func importOf(build string) string {
	return goldenDS + "-" + digestOf(build)[len("sha256:"):][:12]
}

// newDataImportCron builds the cron importing macOSImage twice a day into
// imports managed through the DataSource goldenDS.
func newDataImportCron(ns string) *cdiv1.DataImportCron {
	return &cdiv1.DataImportCron{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cronName},
		Spec: cdiv1.DataImportCronSpec{
			Schedule:          "0 */12 * * *",
			ManagedDataSource: goldenDS,
			Template: cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To(macOSImage)}},
				Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")},
				}},
			}},
		},
	}
}

func getDataImportCron(ns string) (*cdiv1.DataImportCron, error) {
	dic := &cdiv1.DataImportCron{}
	return dic, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: cronName}, dic)
}

// dataSourcePVC polls the name of the PVC goldenDS points at.
func dataSourcePVC(ns string) func(Gomega) string {
	return func(g Gomega) string {
		ds := &cdiv1.DataSource{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: goldenDS}, ds)).To(Succeed())
		if ds.Spec.Source.PVC == nil {
			return ""
		}
		return ds.Spec.Source.PVC.Name
	}
}

// dataVolumeExists polls whether a DataVolume exists.
func dataVolumeExists(ns, name string) func(Gomega) bool {
	return func(g Gomega) bool {
		_, err := getDataVolume(ns, name)
		if apierrors.IsNotFound(err) {
			return false
		}
		g.Expect(err).NotTo(HaveOccurred())
		return true
	}
}

// cronCondition matches a DataImportCron condition.
func cronCondition(t cdiv1.DataImportCronConditionType, status corev1.ConditionStatus, reason, msg string) OmegaMatcher {
	return ContainElement(And(HaveField("Type", t), HaveField("Status", status),
		HaveField("Reason", reason), HaveField("Message", msg)))
}

// cronConditions polls the cron's conditions.
func cronConditions(ns string) func(Gomega) []cdiv1.DataImportCronCondition {
	return func(g Gomega) []cdiv1.DataImportCronCondition {
		dic, err := getDataImportCron(ns)
		g.Expect(err).NotTo(HaveOccurred())
		return dic.Status.Conditions
	}
}

// createCron creates a cron and deletes it when the spec ends, so that it
// polls no later spec's registry.
func createCron(dic *cdiv1.DataImportCron) {
	ExpectWithOffset(1, k8sClient.Create(ctx, dic)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, dic))).To(Succeed())
	})
}

// publish makes the registry serve a new build of macOSImage and has the
// cron poll it now.
func publish(registry *simulator.Registry, ns, build string) {
	registry.SetDigest(macOSImage, digestOf(build))
	sim.PollDataImportCron(ns, cronName)
}

var _ = Describe("DataImportCron", func() {
	var (
		ns       string
		registry *simulator.Registry
	)
	BeforeEach(func() {
		ns = newNamespace()
		registry = simulator.NewRegistry()
		sim.SetRegistry(registry)
		DeferCleanup(sim.SetRegistry, (*simulator.Registry)(nil))
	})

	It("imports each new digest, moves its DataSource to the latest import and deletes imports beyond importsToKeep", func() {
		registry.SetDigest(macOSImage, digestOf("A"))
		dic := newDataImportCron(ns)
		dic.Spec.ImportsToKeep = ptr.To[int32](2)
		createCron(dic)

		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))
		Eventually(dataSourceReady(ns, goldenDS)).WithTimeout(timeout).Should(Equal("True Ready: DataSource is ready to be consumed"))
		Eventually(cronConditions(ns)).WithTimeout(timeout).Should(And(
			cronCondition(cdiv1.DataImportCronUpToDate, corev1.ConditionTrue, "UpToDate", "Latest import is up to date"),
			cronCondition(cdiv1.DataImportCronProgressing, corev1.ConditionFalse, "NoImport", "No current import"),
		))
		got, err := getDataImportCron(ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Annotations).To(HaveKeyWithValue(simulator.AnnSourceDesiredDigest, digestOf("A")))
		Expect(got.Status.CurrentImports).To(Equal([]cdiv1.ImportStatus{{DataVolumeName: importOf("A"), Digest: digestOf("A")}}))
		Expect(got.Status.LastImportedPVC).To(Equal(&cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: importOf("A")}))
		Expect(got.Status.LastImportTimestamp).NotTo(BeNil())
		Expect(got.Status.LastExecutionTimestamp).NotTo(BeNil())
		Expect(got.Status.SourceFormat).To(Equal(ptr.To(cdiv1.DataImportCronSourceFormatPvc)))
		dv, err := getDataVolume(ns, importOf("A"))
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Labels).To(HaveKeyWithValue(simulator.LabelDataImportCronName, cronName))
		Expect(*dv.Spec.Source.Registry.URL).To(Equal("docker://quay.io/macvirt/macos@" + digestOf("A")))
		ds := &cdiv1.DataSource{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: goldenDS}, ds)).To(Succeed())
		Expect(ds.Labels).To(HaveKeyWithValue(simulator.LabelDataImportCronName, cronName))

		publish(registry, ns, "B")
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("B")))
		Expect(dataVolumeExists(ns, importOf("A"))(Default)).To(BeTrue(), "two imports are kept")

		publish(registry, ns, "C")
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("C")))
		Eventually(dataVolumeExists(ns, importOf("A"))).WithTimeout(timeout).Should(BeFalse())
		Expect(dataVolumeExists(ns, importOf("B"))(Default)).To(BeTrue())
		Expect(dataVolumeExists(ns, importOf("C"))(Default)).To(BeTrue())
	})

	It("reports no digest and gives its DataSource no source while the registry cannot be polled", func() {
		sim.SetRegistry(nil)
		createCron(newDataImportCron(ns))

		Eventually(cronConditions(ns)).WithTimeout(timeout).Should(And(
			cronCondition(cdiv1.DataImportCronUpToDate, corev1.ConditionFalse, "NoDigest", "No source digest"),
			cronCondition(cdiv1.DataImportCronProgressing, corev1.ConditionFalse, "NoImport", "No current import"),
		))
		Eventually(dataSourceReady(ns, goldenDS)).WithTimeout(timeout).Should(Equal("False NoSource: No source PVC set"))
		sim.PollDataImportCron(ns, cronName)
		Consistently(func(g Gomega) []cdiv1.DataVolume {
			dvs := &cdiv1.DataVolumeList{}
			g.Expect(k8sClient.List(ctx, dvs, client.InNamespace(ns))).To(Succeed())
			return dvs.Items
		}).WithTimeout(10 * stepInterval).Should(BeEmpty())
		got, err := getDataImportCron(ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Annotations).NotTo(HaveKey(simulator.AnnSourceDesiredDigest))
		Expect(got.Status.LastExecutionTimestamp).To(BeNil())

		// The image appears: the next poll finds it.
		sim.SetRegistry(registry)
		publish(registry, ns, "A")
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))
	})

	It("polls again at each time of its schedule", func() {
		registry.SetDigest(macOSImage, digestOf("A"))
		dic := newDataImportCron(ns)
		dic.Spec.Schedule = "@every 1s"
		createCron(dic)
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))

		registry.SetDigest(macOSImage, digestOf("B"))
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("B")))
	})

	It("keeps every import with garbageCollect Never", func() {
		registry.SetDigest(macOSImage, digestOf("A"))
		dic := newDataImportCron(ns)
		dic.Spec.ImportsToKeep = ptr.To[int32](1)
		dic.Spec.GarbageCollect = ptr.To(cdiv1.DataImportCronGarbageCollectNever)
		createCron(dic)
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))

		publish(registry, ns, "B")
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("B")))
		Consistently(dataVolumeExists(ns, importOf("A"))).WithTimeout(5 * stepInterval).Should(BeTrue())
	})

	It("leaves its DataSource and imports behind when deleted under the default retention policy", func() {
		registry.SetDigest(macOSImage, digestOf("A"))
		dic := newDataImportCron(ns)
		createCron(dic)
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))

		Expect(k8sClient.Delete(ctx, dic)).To(Succeed())
		Consistently(dataVolumeExists(ns, importOf("A"))).WithTimeout(5 * stepInterval).Should(BeTrue())
		Expect(dataSourcePVC(ns)(Default)).To(Equal(importOf("A")))
	})

	It("deletes its DataSource and imports with it under retentionPolicy None", func() {
		registry.SetDigest(macOSImage, digestOf("A"))
		dic := newDataImportCron(ns)
		dic.Spec.RetentionPolicy = ptr.To(cdiv1.DataImportCronRetainNone)
		createCron(dic)
		Eventually(dataSourcePVC(ns)).WithTimeout(timeout).Should(Equal(importOf("A")))

		Expect(k8sClient.Delete(ctx, dic)).To(Succeed())
		Eventually(dataVolumeExists(ns, importOf("A"))).WithTimeout(timeout).Should(BeFalse())
		Eventually(func() bool {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: goldenDS}, &cdiv1.DataSource{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(timeout).Should(BeTrue())
	})
})
