package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/google/uuid"
	"kubevirt.io/kubevirt/pkg/defaults"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/validating-webhook/admitters"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	"kubevirt.io/kubevirt/pkg/virt-controller/services"
	vmcontroller "kubevirt.io/kubevirt/pkg/virt-controller/watch/vm"
)

// launcherFacts is what KubeVirt's own code says about a VirtualMachine's
// instance before it runs: what virt-api's instance admission finds wrong
// with its spec, and the resources of the compute container of the
// virt-launcher pod virt-controller renders for it. The render tests read
// these files (internal/render/testdata/launcher) to check that what
// macvirt asks of the scheduler (one macOS slot) reaches the pod, and that
// virt-api admits it.
type launcherFacts struct {
	// Admission lists ValidateVirtualMachineInstanceSpec's causes
	// (pkg/virt-api/webhooks/validating-webhook/admitters/
	// vmi-create-admitter.go); empty when virt-api admits the instance.
	Admission []metav1.StatusCause `json:"admission"`
	// Compute is the compute container's resources, as
	// TemplateService.RenderLaunchManifest renders them
	// (pkg/virt-controller/services/template.go, with the VMI's own
	// requests and limits copied over by renderresources.go's
	// copyResources).
	Compute corev1.ResourceRequirements `json:"compute"`
	// NodeSelector and Tolerations are the pod's.
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
}

// launcher writes the launcher facts of the input's VirtualMachine.
func (g *generator) launcher(in *input, inputPath, base, outPath string) error {
	clusterConfig, err := newClusterConfig()
	if err != nil {
		return err
	}
	vm := in.vm.DeepCopy()
	if vm.Spec.Template.Spec.Architecture == "" {
		vm.Spec.Template.Spec.Architecture = clusterConfig.GetDefaultArchitecture()
	}
	defaults.SetVirtualMachineDefaults(vm, clusterConfig, nil)
	vmi := vmcontroller.SetupVMIFromVM(vm)
	vmi.UID = types.UID(uuid.NewSHA1(uidNamespace, []byte(vm.Namespace+"/"+vm.Name)).String())
	if err := mutators.ApplyNewVMIMutations(vmi, clusterConfig); err != nil {
		return fmt.Errorf("VirtualMachineInstance defaults: %w", err)
	}
	facts := launcherFacts{Admission: admitters.ValidateVirtualMachineInstanceSpec(k8sfield.NewPath("spec"), &vmi.Spec, clusterConfig)}
	if facts.Admission == nil {
		facts.Admission = []metav1.StatusCause{}
	}
	pod, err := templateService(clusterConfig, in, vmi.Namespace).RenderLaunchManifest(vmi)
	if err != nil {
		return fmt.Errorf("rendering the virt-launcher pod: %w", err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "compute" {
			facts.Compute = c.Resources
		}
	}
	facts.NodeSelector, facts.Tolerations = pod.Spec.NodeSelector, pod.Spec.Tolerations
	body, err := yaml.Marshal(facts)
	if err != nil {
		return err
	}
	shown, err := shownPath(inputPath, base)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(inputPath)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Code generated from %s (sha256 %x) by hack/kubevirt/domainxml with %s %s's virt-api admission and virt-controller template service. DO NOT EDIT.\n",
		shown, sha256.Sum256(raw), kubevirtModule, g.kubevirtVersion)
	buf.Write(body)
	return os.WriteFile(outPath, buf.Bytes(), 0o644)
}

// templateService is virt-controller's template service in the default
// configuration, with the input's claims and namespace in its stores.
func templateService(clusterConfig *virtconfig.ClusterConfig, in *input, namespace string) *services.TemplateService {
	claims := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for name, c := range in.claims {
		_ = claims.Add(&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: c.accessModes, VolumeMode: c.volumeMode,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: c.size}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: c.accessModes,
				Capacity: corev1.ResourceList{corev1.ResourceStorage: c.size}},
		})
	}
	namespaces := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = namespaces.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	return services.NewTemplateService("quay.io/kubevirt/virt-launcher:"+"test", 240,
		"/var/run/kubevirt", "/var/run/kubevirt-ephemeral-disks", "/var/run/kubevirt/container-disks",
		"/var/run/kubevirt/hotplug-disks", "", claims, nil, clusterConfig, 107, "", cache.NewStore(cache.MetaNamespaceKeyFunc), namespaces)
}
