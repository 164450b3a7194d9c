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
	"fmt"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newDataVolume builds a DataVolume importing a disk image over HTTP.
func newDataVolume(ns, name string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{
				HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/macos-sequoia.qcow2"},
			},
			Storage: &cdiv1.StorageSpec{
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Gi")},
				},
			},
		},
	}
}

// newClonedDataVolume builds a DataVolume cloned from a DataSource.
func newClonedDataVolume(ns, name, dataSource string) *cdiv1.DataVolume {
	dv := newDataVolume(ns, name)
	dv.Spec.Source = nil
	dv.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: dataSource}
	return dv
}

// newVM builds a minimal VirtualMachine that always runs, with one disk per
// DataVolume.
func newVM(ns, name string, dataVolumes ...string) *kubevirtv1.VirtualMachine {
	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			Resources: kubevirtv1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
			},
		},
	}
	for _, dv := range dataVolumes {
		spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{
			Name:       dv,
			DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusSATA}},
		})
		spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{
			Name:         dv,
			VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: dv}},
		})
	}
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"kubevirt.io/domain": name},
					Annotations: map[string]string{"macvirt.io/test": "template"},
				},
				Spec: spec,
			},
		},
	}
}

// create creates obj with strict field validation.
func create(obj client.Object) {
	ExpectWithOffset(1, k8sClient.Create(ctx, obj)).To(Succeed())
}

// importedDataVolume creates a DataVolume and waits for its import to
// succeed.
func importedDataVolume(ns, name string) {
	create(newDataVolume(ns, name))
	EventuallyWithOffset(1, dataVolumePhase(ns, name)).WithTimeout(timeout).Should(Equal(cdiv1.Succeeded))
}

func getDataVolume(ns, name string) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{}
	return dv, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, dv)
}

func getVM(ns, name string) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	return vm, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm)
}

func getVMI(ns, name string) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	return vmi, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vmi)
}

// dataVolumePhase polls a DataVolume's phase.
func dataVolumePhase(ns, name string) func(Gomega) cdiv1.DataVolumePhase {
	return func(g Gomega) cdiv1.DataVolumePhase {
		dv, err := getDataVolume(ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		return dv.Status.Phase
	}
}

// printableStatus polls a VirtualMachine's printableStatus.
func printableStatus(ns, name string) func(Gomega) kubevirtv1.VirtualMachinePrintableStatus {
	return func(g Gomega) kubevirtv1.VirtualMachinePrintableStatus {
		vm, err := getVM(ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		return vm.Status.PrintableStatus
	}
}

// vmiPhase polls an instance's phase.
func vmiPhase(ns, name string) func(Gomega) kubevirtv1.VirtualMachineInstancePhase {
	return func(g Gomega) kubevirtv1.VirtualMachineInstancePhase {
		vmi, err := getVMI(ns, name)
		g.Expect(err).NotTo(HaveOccurred())
		return vmi.Status.Phase
	}
}

// describeDataVolume is a DataVolume's phase and progress.
func describeDataVolume(dv *cdiv1.DataVolume) string {
	return fmt.Sprintf("%s %s", dv.Status.Phase, dv.Status.Progress)
}

// describeVM is a VirtualMachine's printableStatus.
func describeVM(vm *kubevirtv1.VirtualMachine) string {
	return string(vm.Status.PrintableStatus)
}
