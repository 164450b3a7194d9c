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
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/macvirt/macvirt/test/infrastructure/simulator"
)

// condition matches a DataVolume condition by status and reason.
func condition(t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, reason string) OmegaMatcher {
	return ContainElement(MatchFields(IgnoreExtras, Fields{
		"Type": Equal(t), "Status": Equal(status), "Reason": Equal(reason),
	}))
}

var _ = Describe("DataVolume", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("imports through the import phases to Succeeded, reporting progress", func() {
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		create(newDataVolume(ns, "disk"))

		Eventually(dataVolumePhase(ns, "disk")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{
			" ",
			"Pending N/A",
			"ImportScheduled N/A",
			"ImportInProgress 0.00%",
			"ImportInProgress 25.00%",
			"ImportInProgress 50.00%",
			"ImportInProgress 75.00%",
			"Succeeded 100.0%",
		}))
		dv, err := getDataVolume(ns, "disk")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Status.ClaimName).To(Equal("disk"))
		Expect(dv.Status.Conditions).To(And(
			condition(cdiv1.DataVolumeBound, corev1.ConditionTrue, "Bound"),
			condition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Completed"),
			condition(cdiv1.DataVolumeReady, corev1.ConditionTrue, ""),
		))
	})

	It("clones a DataVolume whose source is a DataSource through the clone phases", func() {
		goldenImage(ns, "macos-sequoia")
		seen := record(&cdiv1.DataVolumeList{}, ns, describeDataVolume)
		create(newClonedDataVolume(ns, "clone", "macos-sequoia"))

		Eventually(dataVolumePhase(ns, "clone")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
		Eventually(seen.Seen).WithTimeout(timeout).Should(Equal([]string{
			" ",
			"Pending N/A",
			"CloneScheduled N/A",
			"CloneInProgress 0.00%",
			"CloneInProgress 25.00%",
			"CloneInProgress 50.00%",
			"CloneInProgress 75.00%",
			"Succeeded 100.0%",
		}))
		dv, err := getDataVolume(ns, "clone")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Status.Conditions).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type": Equal(cdiv1.DataVolumeRunning), "Message": Equal("Clone Complete"),
		})))
	})

	It("restarts a failing importer instead of failing the DataVolume, and resumes once the fault is cleared", func() {
		fault := simulator.Fault{Kind: simulator.DataVolumeFailed, Namespace: ns, Name: "broken"}
		sim.Inject(fault)
		DeferCleanup(sim.Clear, fault)
		create(newDataVolume(ns, "broken"))

		Eventually(func(g Gomega) int32 {
			dv, err := getDataVolume(ns, "broken")
			g.Expect(err).NotTo(HaveOccurred())
			return dv.Status.RestartCount
		}).WithTimeout(timeout).Should(BeNumerically(">=", 2))
		dv, err := getDataVolume(ns, "broken")
		Expect(err).NotTo(HaveOccurred())
		Expect(dv.Status.Phase).To(Equal(cdiv1.ImportInProgress))
		Expect(dv.Status.Conditions).To(And(
			condition(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error"),
			condition(cdiv1.DataVolumeReady, corev1.ConditionFalse, "TransferRunning"),
			ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type": Equal(cdiv1.DataVolumeRunning), "Message": ContainSubstring("expected status code 200, got 404"),
			})),
		))

		sim.Clear(fault)
		Eventually(dataVolumePhase(ns, "broken")).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
	})
})
