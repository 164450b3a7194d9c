package render_test

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// classOption changes one thing of the default test class.
type classOption func(*macvirtv1alpha1.MacClass)

// testClass is a class as the API server stores it after CRD defaulting,
// with DataSource references for both disks, changed by opts.
func testClass(opts ...classOption) *macvirtv1alpha1.MacClass {
	c := &macvirtv1alpha1.MacClass{
		ObjectMeta: metav1.ObjectMeta{Name: "sonoma"},
		Spec: macvirtv1alpha1.MacClassSpec{
			Description: "macOS 14, 4 vCPU, 8 GiB",
			Resources:   macvirtv1alpha1.ClassResources{CPU: 4, Memory: ptr(resource.MustParse("8Gi"))},
			Image: macvirtv1alpha1.ImageSpec{
				DiskSource: macvirtv1alpha1.DiskSource{SourceRef: &cdiv1.DataVolumeSourceRef{
					Kind: cdiv1.DataVolumeDataSource, Namespace: ptr("macvirt-images"), Name: "sonoma"}},
				Size: ptr(resource.MustParse("128Gi")),
			},
			Bootloader: macvirtv1alpha1.BootloaderSpec{
				DiskSource: macvirtv1alpha1.DiskSource{SourceRef: &cdiv1.DataVolumeSourceRef{
					Kind: cdiv1.DataVolumeDataSource, Namespace: ptr("macvirt-images"), Name: "opencore-1.0"}},
				Size: ptr(resource.MustParse("1Gi")),
			},
			Hardware: macvirtv1alpha1.HardwareSpec{
				CPUModel: macvirtv1alpha1.CPUModelHaswellNoTSX,
				NICModel: macvirtv1alpha1.NICModelVmxnet3,
				DiskBus:  macvirtv1alpha1.DiskBusSATA,
				SMC:      macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeVirtualSMC},
				SMBIOS:   macvirtv1alpha1.ClassSMBIOS{ProductName: "iMacPro1,1"},
				Display:  macvirtv1alpha1.DisplaySpec{Model: macvirtv1alpha1.DisplayModelVGA},
			},
			Placement: macvirtv1alpha1.PlacementSpec{
				NodeSelector: map[string]string{"macvirt.io/apple-hardware": "true"},
				Tolerations: []corev1.Toleration{{
					Key: "macvirt.io/apple-hardware", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			},
			Lifecycle: macvirtv1alpha1.LifecycleSpec{
				ShutdownGracePeriod: &metav1.Duration{Duration: 5 * time.Minute},
				BootTimeout:         &metav1.Duration{Duration: 20 * time.Minute},
				HeartbeatTimeout:    &metav1.Duration{Duration: 2 * time.Minute},
			},
			Tenancy: macvirtv1alpha1.TenancySpec{OnDemand: ptr(true)},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// testMachine is a machine of testClass with a fixed identity.
func testMachine(mods ...func(*macvirtv1alpha1.MacMachine)) *macvirtv1alpha1.MacMachine {
	m := &macvirtv1alpha1.MacMachine{
		ObjectMeta: metav1.ObjectMeta{
			Name: "sonoma-7k2xq", Namespace: "macvirt-pools", UID: "1b7f9a52-1c3e-4d1e-9a51-0d7c2b6e8f10",
			Labels: map[string]string{macvirtv1alpha1.LabelPool: "ci-sonoma"},
			Annotations: map[string]string{
				macvirtv1alpha1.AnnotationAgentTokenHash: "4c1d6e0f2a9b8c7d3e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5",
				macvirtv1alpha1.AnnotationAgentSecret:    "sonoma-7k2xq-agent-4c1d6e0f2a",
			},
		},
		Spec: macvirtv1alpha1.MacMachineSpec{
			ClassName:     "sonoma",
			ClassRevision: "0123456789",
			Running:       ptr(true),
			SMBIOS: &macvirtv1alpha1.MachineSMBIOS{
				SerialNumber: "C02XK1ZJHX87",
				BoardSerial:  "C02123ABCDEHX87FG",
				UUID:         "5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60",
			},
		},
	}
	for _, mod := range mods {
		mod(m)
	}
	return m
}

var testOptions = render.Options{HookImage: "ghcr.io/macvirt/domain-hook:v0.1.0"}

func ptr[T any](v T) *T { return &v }
