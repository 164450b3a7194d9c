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

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// sourcePVC creates a PVC for a DataSource or a clone to use.
func sourcePVC(ns, name string) {
	create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")},
			},
		},
	})
}

// dataSource creates a DataSource whose source is the PVC pvc ("" for
// none).
func dataSource(ns, name, pvc string) {
	ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if pvc != "" {
		ds.Spec.Source.PVC = &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: pvc}
	}
	create(ds)
}

// goldenImage creates a source PVC and a DataSource of the same name
// pointing at it.
func goldenImage(ns, name string) {
	sourcePVC(ns, name)
	dataSource(ns, name, name)
}

// dataSourceReady polls a DataSource's Ready condition as "status reason: message".
func dataSourceReady(ns, name string) func(Gomega) string {
	return func(g Gomega) string {
		ds := &cdiv1.DataSource{}
		g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, ds)).To(Succeed())
		for _, c := range ds.Status.Conditions {
			if c.Type == cdiv1.DataSourceReady {
				return string(c.Status) + " " + c.Reason + ": " + c.Message
			}
		}
		return ""
	}
}

// wffcStorageClass creates a StorageClass that binds on first consumer,
// deleted when the spec ends.
func wffcStorageClass() string {
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{GenerateName: "local-wffc-"},
		Provisioner:       "rancher.io/local-path",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	create(sc)
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, sc))).To(Succeed()) })
	return sc.Name
}

var _ = Describe("DataVolume sources and storage", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("reports a DataSource Ready only once its source PVC exists", func() {
		dataSource(ns, "empty", "")
		dataSource(ns, "later", "later")
		Eventually(dataSourceReady(ns, "empty")).WithTimeout(timeout).Should(Equal("False NoSource: No source PVC set"))
		Eventually(dataSourceReady(ns, "later")).WithTimeout(timeout).Should(Equal("False NotFound: PVC not found"))

		sourcePVC(ns, "later")
		Eventually(dataSourceReady(ns, "later")).WithTimeout(timeout).Should(Equal("True Ready: DataSource is ready to be consumed"))
	})

	It("refuses, in CDI's words, a clone whose DataSource does not exist; gives one whose DataSource has no source no status; clones once it resolves", func() {
		err := k8sClient.Create(ctx, newClonedDataVolume(ns, "missing", "sequoia"))
		Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "CDI's webhook answers 400: %v", err)
		Expect(err).To(MatchError(`admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request: ` +
			`datasources.cdi.kubevirt.io "sequoia" not found`))
		_, err = getDataVolume(ns, "missing")
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing was created: %v", err)

		dataSource(ns, "empty", "")
		create(newClonedDataVolume(ns, "unresolved", "empty"))
		Consistently(dataVolumePhase(ns, "unresolved")).WithTimeout(4 * stepInterval).WithPolling(stepInterval).Should(BeEmpty())
		dv, err := getDataVolume(ns, "unresolved")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Status.Conditions).To(BeEmpty())

		goldenImage(ns, "sequoia")
		create(newClonedDataVolume(ns, "missing", "sequoia"))
		Eventually(dataVolumePhase(ns, "missing")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})

	It("keeps a clone whose source PVC is missing without a phase, with CloneWithoutSource and a Warning event", func() {
		dataSource(ns, "sequoia", "sequoia")
		create(newClonedDataVolume(ns, "clone", "sequoia"))
		Eventually(func(g Gomega) []cdiv1.DataVolumeCondition {
			dv, err := getDataVolume(ns, "clone")
			g.Expect(err).NotTo(HaveOccurred())
			return dv.Status.Conditions
		}).WithTimeout(timeout).Should(ContainElement(MatchFieldsBound("The source pvc sequoia doesn't exist")))
		Consistently(dataVolumePhase(ns, "clone")).WithTimeout(5 * stepInterval).WithPolling(stepInterval).Should(BeEmpty())
		Eventually(func(g Gomega) []string {
			evs := &corev1.EventList{}
			g.Expect(k8sClient.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
			var reasons []string
			for _, e := range evs.Items {
				if e.InvolvedObject.Name == "clone" && e.Type == corev1.EventTypeWarning {
					reasons = append(reasons, e.Reason)
				}
			}
			return reasons
		}).WithTimeout(timeout).Should(ContainElement("CloneWithoutSource"))

		sourcePVC(ns, "sequoia")
		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})

	It("keeps a WaitForFirstConsumer DataVolume PendingPopulation until a launcher pod is placed, and binds that pod only once the disk is filled", func() {
		sc := wffcStorageClass()
		dv := newDataVolume(ns, "disk")
		dv.Spec.Storage.StorageClassName = &sc
		create(dv)
		vm := newVM(ns, "mac", "disk")
		vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
		create(vm)
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.PendingPopulation))
		Consistently(dataVolumePhase(ns, "disk")).WithTimeout(6 * stepInterval).WithPolling(stepInterval).Should(Equal(cdiv1.PendingPopulation))
		Expect(claimPhase(ns, "disk")(Default)).To(Equal(corev1.ClaimPending), "a provisioner waits for the first consumer")

		// The import is held once it starts, so that the wait can be seen.
		held := simulator.Fault{Kind: simulator.ImporterUnschedulable, Namespace: ns, Name: "disk"}
		sim.Inject(held)
		DeferCleanup(sim.Clear, held)
		Eventually(func() error {
			got, err := getVM(ns, "mac")
			if err != nil {
				return err
			}
			got.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyAlways)
			return k8sClient.Update(ctx, got)
		}).WithTimeout(timeout).Should(Succeed())
		// virt-controller counts a PendingPopulation disk ready and makes
		// the launcher pod; placing it selects the node for the PVC, which
		// lets CDI go on.
		Eventually(func() string {
			return getClaim(ns, "disk").Annotations["volume.kubernetes.io/selected-node"]
		}).WithTimeout(timeout).Should(Equal(simulator.DefaultNodeName))
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.ImportScheduled))
		// The volume is bound to the PVC only once filled: until then the
		// pod has no node and the instance does not run.
		launcherBound := func() bool {
			pods := &corev1.PodList{}
			Expect(k8sClient.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{kubevirtv1.AppLabel: "virt-launcher"})).To(Succeed())
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					return true
				}
			}
			return false
		}
		Consistently(launcherBound).WithTimeout(6 * stepInterval).WithPolling(stepInterval).Should(BeFalse())
		Expect(vmiPhase(ns, "mac")(Default)).NotTo(Equal(kubevirtv1.Running))
		Expect(claimPhase(ns, "disk")(Default)).To(Equal(corev1.ClaimPending))

		sim.Clear(held)
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(vmiPhase(ns, "mac")).WithTimeout(timeout).Should(Equal(kubevirtv1.Running))
		Expect(launcherBound()).To(BeTrue())
	})

	It("populates a WaitForFirstConsumer DataVolume at once when immediate binding is requested", func() {
		sc := wffcStorageClass()
		dv := newDataVolume(ns, "disk")
		dv.Spec.Storage.StorageClassName = &sc
		dv.Annotations = map[string]string{simulator.AnnImmediateBinding: "true"}
		create(dv)
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})

	It("holds a DataVolume Pending with Bound=False ErrExceededQuota while the quota refuses its PVC", func() {
		fault := simulator.Fault{Kind: simulator.DataVolumeQuotaExceeded, Namespace: ns, Name: "disk"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		create(newDataVolume(ns, "disk"))
		Eventually(func(g Gomega) []cdiv1.DataVolumeCondition {
			dv, err := getDataVolume(ns, "disk")
			g.Expect(err).NotTo(HaveOccurred())
			return dv.Status.Conditions
		}).WithTimeout(timeout).Should(condition(cdiv1.DataVolumeBound, corev1.ConditionFalse, "ErrExceededQuota"))
		Consistently(dataVolumePhase(ns, "disk")).WithTimeout(5 * stepInterval).WithPolling(stepInterval).Should(Equal(cdiv1.Pending))

		sim.Clear(fault)
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})

	It("holds a DataVolume ImportScheduled with Running=False Unschedulable while its importer finds no node", func() {
		fault := simulator.Fault{Kind: simulator.ImporterUnschedulable, Namespace: ns, Name: "disk"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		create(newDataVolume(ns, "disk"))
		Eventually(func(g Gomega) []cdiv1.DataVolumeCondition {
			dv, err := getDataVolume(ns, "disk")
			g.Expect(err).NotTo(HaveOccurred())
			return dv.Status.Conditions
		}).WithTimeout(timeout).Should(condition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Unschedulable"))
		Expect(dataVolumePhase(ns, "disk")(Default)).To(Equal(cdiv1.ImportScheduled))

		sim.Clear(fault)
		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})
})

// MatchFieldsBound matches a Bound=False CloneWithoutSource condition with msg.
func MatchFieldsBound(msg string) OmegaMatcher {
	return And(HaveField("Type", cdiv1.DataVolumeBound), HaveField("Status", corev1.ConditionFalse),
		HaveField("Reason", "CloneWithoutSource"), HaveField("Message", msg))
}
