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

package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

var _ = Describe("Stopping a VM whose run strategy a user changed", func() {
	BeforeEach(func() {
		DeferCleanup(startOperator())
	})

	// KubeVirt keeps Manual and RerunOnFailure on a stop and records a stop
	// request instead; once the instance is gone it refuses another stop
	// ("VM is not running"), which must not hold the deletion back.
	for _, strategy := range []kubevirtv1.VirtualMachineRunStrategy{kubevirtv1.RunStrategyManual, kubevirtv1.RunStrategyRerunOnFailure} {
		It("deletes a machine whose VM was switched to "+string(strategy), func() {
			ns := newNamespace()
			class := newClass()
			k := key(newMachine(ns, class.Name))
			Eventually(phase(k)).WithTimeout(timeout).Should(Equal(macvirtv1alpha1.MachineBooting))
			vm := vmOf(k)()
			Expect(vm).NotTo(BeNil())
			patch := client.MergeFrom(vm.DeepCopy())
			vm.Spec.RunStrategy = &strategy
			Expect(k8sClient.Patch(context.Background(), vm, patch)).To(Succeed())

			Expect(k8sClient.Delete(context.Background(), getMachine(k))).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(context.Background(), k, &kubevirtv1.VirtualMachineInstance{}))
			}).WithTimeout(timeout).Should(BeTrue())
			// KubeVirt kept the strategy: the stop went through a request.
			Expect(vmOf(k)()).To(SatisfyAny(BeNil(), HaveField("Spec.RunStrategy", HaveValue(Equal(strategy)))))
			Eventually(func() bool { return vmOf(k)() == nil }).WithTimeout(timeout).Should(BeTrue(),
				"the VM must be deleted once its instance is gone")
			deleteAndWait(k)
		})
	}
})
