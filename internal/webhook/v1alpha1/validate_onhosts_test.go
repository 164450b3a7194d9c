package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// hostsClass is a Virtualization class as an admin writes it, defaulted.
func hostsClass() *macvirtv1alpha1.MacClass {
	c := minimalClass()
	c.Spec.Runtime = macvirtv1alpha1.RuntimeVirtualization
	c.Spec.Bootloader = macvirtv1alpha1.BootloaderSpec{}
	imageSource(cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://ghcr.io/cirruslabs/macos-sequoia-base:latest")}})(c)
	DefaultMacClass(c)
	return c
}

func TestAVirtualizationClassNeedsNoBootloader(t *testing.T) {
	c := hostsClass()
	if c.Spec.Bootloader != (macvirtv1alpha1.BootloaderSpec{}) {
		t.Fatalf("defaulting gave the class a bootloader: %+v", c.Spec.Bootloader)
	}
	if errs, _ := ValidateMacClass(c, ClassEnv{}); len(errs) != 0 {
		t.Fatalf("refused: %v", errs)
	}
	if got := c.Spec.VMImage(); got != "ghcr.io/cirruslabs/macos-sequoia-base:latest" {
		t.Errorf("VM image %q; want the reference without docker://", got)
	}
}

func TestValidateVirtualizationClassRejections(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*macvirtv1alpha1.MacClass)
		path   string
		want   string
	}{
		"a bootloader": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Bootloader.Size = qty("1Gi") },
			"spec.bootloader", "boots macOS itself"},
		"an image from a DataSource": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.Source, c.Spec.Image.SourceRef = nil, &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: "sonoma", Namespace: strPtr("img")}
		}, "spec.image.sourceRef", "do not reach a Mac"},
		"an image over http": {imageSource(cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://x/y"}}),
			"spec.image.source.registry.url", "OCI reference tart or lume can pull"},
		"a VM already on the Mac, by its name": {imageSource(cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://macvirt-0b9c2f3e-0000-4000-8000-000000000001")}}),
			"spec.image.source.registry.url", "names no registry"},
		"an option for tart": {imageSource(cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://--insecure")}}),
			"spec.image.source.registry.url", "not an image reference"},
		"CDI's imports to keep": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 * * * *", ImportsToKeep: ptr.To[int32](2)}
		},
			"spec.image.refresh.importsToKeep", "one copy of each tag"},
		"an installer": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Installer = &macvirtv1alpha1.InstallerSpec{RecoverySourceRef: cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: strPtr("img"), Name: "r"}}
		}, "spec.installer", "KubeVirt only"},
		"NodePort access": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP, macvirtv1alpha1.AccessNodePort}
		}, "spec.tenancy.allowedAccessTypes[1]", "reaches it through the tunnel"},
		"a LoadBalancer by default": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessLoadBalancer}
			c.Spec.Access.DefaultType = macvirtv1alpha1.AccessLoadBalancer
		}, "spec.tenancy.allowedAccessTypes[0]", "sits behind its NAT"},
		"a host selector with a bad operator": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Placement.HostSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "chip", Operator: "Like"}}}
		}, "spec.placement.hostSelector.matchExpressions[0].operator", "not a valid selector operator"},
	} {
		t.Run(name, func(t *testing.T) {
			c := hostsClass()
			tc.mutate(c)
			errs, _ := ValidateMacClass(c, ClassEnv{})
			expectError(t, errs, tc.path, tc.want)
		})
	}
}
