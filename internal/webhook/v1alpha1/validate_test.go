package v1alpha1

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

func qty(s string) *resource.Quantity      { q := resource.MustParse(s); return &q }
func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func imageSource(s cdiv1.DataVolumeSource) func(*macvirtv1alpha1.MacClass) {
	return func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef, c.Spec.Image.Source = nil, &s }
}

// classRejections is every way a class is refused: the field named and
// what the message says.
var classRejections = map[string]struct {
	mutate func(*macvirtv1alpha1.MacClass)
	path   string
	want   string
}{
	"one vCPU":               {func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.CPU = 1 }, "spec.resources.cpu", "between 2 and 64"},
	"65 vCPUs":               {func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.CPU = 65 }, "spec.resources.cpu", "between 2 and 64"},
	"2Gi of memory":          {func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.Memory = qty("2Gi") }, "spec.resources.memory", "at least 4Gi"},
	"8001Mi of memory":       {func(c *macvirtv1alpha1.MacClass) { c.Spec.Resources.Memory = qty("8001Mi") }, "spec.resources.memory", "whole number of 2Mi blocks"},
	"image without a source": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef = nil }, "spec.image.source", "set source"},
	"image with source and sourceRef": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Image.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://x/y"}}
	}, "spec.image.sourceRef", "exactly one of source or sourceRef"},
	"sourceRef of another kind": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef.Kind = "PersistentVolumeClaim" },
		"spec.image.sourceRef.kind", `supported values: "DataSource"`},
	"sourceRef without a name": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef.Name = "" }, "spec.image.sourceRef.name", "Required"},
	"sourceRef in a malformed namespace": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef.Namespace = strPtr("Images_NS") },
		"spec.image.sourceRef.namespace", "RFC 1123"},
	"empty CDI source":    {imageSource(cdiv1.DataVolumeSource{}), "spec.image.source", "name one CDI source"},
	"two CDI sources":     {imageSource(cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://x/y"}, Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://x")}}), "spec.image.source", "http, registry"},
	"http without a URL":  {imageSource(cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{}}), "spec.image.source.http.url", "set the URL"},
	"http with ftp URL":   {imageSource(cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "ftp://x/y"}}), "spec.image.source.http.url", "scheme http, https"},
	"http with a bad URL": {imageSource(cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://[::1"}}), "spec.image.source.http.url", "not a URL"},
	"s3 without a URL":    {imageSource(cdiv1.DataVolumeSource{S3: &cdiv1.DataVolumeSourceS3{}}), "spec.image.source.s3.url", "set the URL"},
	"gcs with http URL":   {imageSource(cdiv1.DataVolumeSource{GCS: &cdiv1.DataVolumeSourceGCS{URL: "http://x/y"}}), "spec.image.source.gcs.url", "scheme gs, https"},
	"registry with neither url nor imageStream": {imageSource(cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{}}),
		"spec.image.source.registry.url", "exactly one of url"},
	"registry with an https URL": {imageSource(cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("https://quay.io/x")}}),
		"spec.image.source.registry.url", "scheme docker, oci-archive"},
	"pvc without a namespace": {imageSource(cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "golden"}}), "spec.image.source.pvc.namespace", "Required"},
	"snapshot with a bad name": {imageSource(cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "img", Name: "Golden!"}}),
		"spec.image.source.snapshot.name", "RFC 1123"},
	"blank disk": {imageSource(cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}), "spec.image.source.blank", "spec.installer.recoverySourceRef"},
	"installer with a disk that is not blank": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Installer = &macvirtv1alpha1.InstallerSpec{RecoverySourceRef: cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Namespace: strPtr("img"), Name: "recovery"}}
	}, "spec.image.source", "blank: {}"},
	"installer without the recovery's namespace": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Image.SourceRef, c.Spec.Image.Source = nil, &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}
		c.Spec.Installer = &macvirtv1alpha1.InstallerSpec{RecoverySourceRef: cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: "recovery"}}
	}, "spec.installer.recoverySourceRef.namespace", "namespace of the recovery DataSource"},
	"refresh of an image that is not a registry's": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "0 */6 * * *"}
	}, "spec.image", "set image.source.registry"},
	"refresh on a schedule that is not cron": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Image.SourceRef, c.Spec.Image.Source = nil, &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://r.example.com/macos:14")}}
		c.Spec.Image.Refresh = &macvirtv1alpha1.ImageRefresh{Schedule: "every six hours"}
	}, "spec.image.refresh.schedule", "not a cron schedule"},
	"upload source":  {imageSource(cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}}), "spec.image.source", `Unsupported value: "upload"`},
	"imageio source": {imageSource(cdiv1.DataVolumeSource{Imageio: &cdiv1.DataVolumeSourceImageIO{}}), "spec.image.source", `Unsupported value: "imageio"`},
	"malformed storageClassName": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.StorageClassName = strPtr("Fast RBD") },
		"spec.image.storageClassName", "RFC 1123"},
	"zero image size":          {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.Size = qty("0") }, "spec.image.size", "positive size"},
	"negative bootloader size": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Bootloader.Size = qty("-1Gi") }, "spec.bootloader.size", "positive size"},
	"bootloader without a source": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Bootloader.Source = nil },
		"spec.bootloader.source", "set source"},
	"AppleSMC without the OSK": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.SMC.Mode = macvirtv1alpha1.SMCModeAppleSMC },
		"spec.hardware.smc.oskSecretRef", "use mode VirtualSMC"},
	"AppleSMC with an OSK reference without key": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
			OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk"}}
	}, "spec.hardware.smc.oskSecretRef.key", "name the key"},
	"unknown SMC mode": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Hardware.SMC.Mode = "FakeSMC" }, "spec.hardware.smc.mode", "supported values"},
	"malformed nodeSelector key": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Placement.NodeSelector = map[string]string{"apple hardware": "true"}
	},
		"spec.placement.nodeSelector", "name part must consist"},
	"toleration operator": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Maybe"}}
	}, "spec.placement.tolerations[0].operator", "supported values"},
	"Exists toleration with a value": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}}
	}, "spec.placement.tolerations[0].value", "must be empty"},
	"Equal toleration without a key": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Placement.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual}}
	}, "spec.placement.tolerations[0].operator", "only with operator Exists"},
	"toleration effect": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Placement.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: "Sometimes"}}
	}, "spec.placement.tolerations[0].effect", "supported values"},
	"shutdownGracePeriod of 0s": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.ShutdownGracePeriod = dur(0) },
		"spec.lifecycle.shutdownGracePeriod", "between 1s and 24h"},
	"bootTimeout of 30s": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.BootTimeout = dur(30 * time.Second) },
		"spec.lifecycle.bootTimeout", "between 1m0s and 24h"},
	"heartbeatTimeout of 2h": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.HeartbeatTimeout = dur(2 * time.Hour) },
		"spec.lifecycle.heartbeatTimeout", "between 10s and 1h"},
	"allowedNamespaces with a bad operator": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Like"}}}
	}, "spec.tenancy.allowedNamespaces.matchExpressions[0].operator", "not a valid selector operator"},
	"macOS 26 on an iMac Pro, which Tahoe dropped": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSTahoe}
		c.Spec.Hardware.SMBIOS.ProductName = "iMacPro1,1"
	}, "spec.hardware.smbios.productName", "macOS 26 (Tahoe) does not support iMacPro1,1 (its last release is macOS 15 (Sequoia)): " +
		"set one of MacBookPro16,1, MacBookPro16,2, MacBookPro16,4, MacPro7,1, iMac20,1, iMac20,2, or remove spec.hardware.smbios.productName " +
		"(perhaps an earlier default) to get MacPro7,1"},
	"macOS 13 on Penryn, which lacks AVX2": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSVentura}
		c.Spec.Hardware.CPUModel = macvirtv1alpha1.CPUModelPenryn
	}, "spec.hardware.cpuModel", "macOS 13 (Ventura) needs AVX2, which Penryn lacks: use Haswell-noTSX, Skylake-Client-noTSX-IBRS or host-passthrough"},
	"macOS 13 on a 2015 iMac": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSVentura}
		c.Spec.Hardware.SMBIOS.ProductName = "iMac17,1"
	}, "spec.hardware.smbios.productName", "macOS 13 (Ventura) does not support iMac17,1"},
	"a pull policy on a KubeVirt class": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.PullPolicy = macvirtv1alpha1.PullAlways },
		"spec.image.pullPolicy", "is for Virtualization classes"},
	"a default access type the class does not allow": {func(c *macvirtv1alpha1.MacClass) {
		c.Spec.Access.DefaultType = macvirtv1alpha1.AccessNodePort
	}, "spec.access.defaultType", "must be one of spec.tenancy.allowedAccessTypes [ClusterIP]: add NodePort there, or pick one of those"},
}

func TestValidateMacClassRejections(t *testing.T) {
	for name, tc := range classRejections {
		t.Run(name, func(t *testing.T) {
			c := minimalClass()
			DefaultMacClass(c)
			tc.mutate(c)
			errs, _ := ValidateMacClass(c, ClassEnv{})
			expectError(t, errs, tc.path, tc.want)
		})
	}
}

func TestValidateMacClassAcceptsEverySupportedSource(t *testing.T) {
	for name, src := range map[string]cdiv1.DataVolumeSource{
		"http":                 {HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/sonoma.img"}},
		"s3":                   {S3: &cdiv1.DataVolumeSourceS3{URL: "s3://bucket/sonoma.img"}},
		"gcs":                  {GCS: &cdiv1.DataVolumeSourceGCS{URL: "gs://bucket/sonoma.img"}},
		"registry url":         {Registry: &cdiv1.DataVolumeSourceRegistry{URL: strPtr("docker://quay.io/macvirt/sonoma:14")}},
		"registry imageStream": {Registry: &cdiv1.DataVolumeSourceRegistry{ImageStream: strPtr("sonoma")}},
		"pvc":                  {PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "macvirt-images", Name: "sonoma"}},
		"snapshot":             {Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "macvirt-images", Name: "sonoma"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := minimalClass()
			DefaultMacClass(c)
			imageSource(src)(c)
			if errs, _ := ValidateMacClass(c, ClassEnv{}); len(errs) != 0 {
				t.Errorf("refused: %v", errs)
			}
		})
	}
}

func TestValidateMacClassWarnings(t *testing.T) {
	tests := map[string]struct {
		mutate func(*macvirtv1alpha1.MacClass)
		env    ClassEnv
		want   string
	}{
		"short shutdownGracePeriod": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.ShutdownGracePeriod = dur(30 * time.Second) },
			ClassEnv{}, "shutdownGracePeriod 30s is under 1m0s: macOS may not finish shutting down"},
		"short bootTimeout": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.BootTimeout = dur(2 * time.Minute) },
			ClassEnv{}, "bootTimeout 2m0s is under 5m0s"},
		"short heartbeatTimeout": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Lifecycle.HeartbeatTimeout = dur(15 * time.Second) },
			ClassEnv{}, "heartbeatTimeout 15s is under 30s"},
		"small image": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.Size = qty("32Gi") }, ClassEnv{}, "spec.image.size 32Gi is under 64Gi"},
		"AppleSMC on KubeVirt's QEMU": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}}
		}, ClassEnv{}, "--emulator-path"},
		"OSK in VirtualSMC mode": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC.OSKSecretRef = &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}
		}, ClassEnv{}, "oskSecretRef is ignored"},
		"no Apple placement": {func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Placement.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		},
			ClassEnv{}, "not Apple's"},
		"sourceRef without namespace": {func(c *macvirtv1alpha1.MacClass) { c.Spec.Image.SourceRef.Namespace = nil },
			ClassEnv{}, "each machine looks for DataSource \"sonoma\" in its own namespace"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := minimalClass()
			DefaultMacClass(c)
			tc.mutate(c)
			errs, warns := ValidateMacClass(c, tc.env)
			if len(errs) != 0 {
				t.Fatalf("refused: %v", errs)
			}
			expectWarning(t, warns, tc.want)
		})
	}
}

func TestValidateMacClassDefaultedHasNoWarnings(t *testing.T) {
	c := minimalClass()
	DefaultMacClass(c)
	errs, warns := ValidateMacClass(c, ClassEnv{})
	if len(errs) != 0 || len(warns) != 0 {
		t.Errorf("errors %v, warnings %q; want none", errs, warns)
	}
	c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
		OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "osk", Key: "osk"}}
	if _, warns := ValidateMacClass(c, ClassEnv{EmulatorOverride: true}); len(warns) != 0 {
		t.Errorf("AppleSMC with an emulator override warned: %q", warns)
	}
}

func TestValidateMacClassUpdateWarnsOfANewRevision(t *testing.T) {
	old := minimalClass()
	DefaultMacClass(old)
	c := old.DeepCopy()
	c.Spec.Description = "only a description"
	if _, warns := ValidateMacClassUpdate(old, c, ClassEnv{}); len(warns) != 0 {
		t.Errorf("a description change warned: %q", warns)
	}
	c.Spec.Resources.CPU = 8
	_, warns := ValidateMacClassUpdate(old, c, ClassEnv{})
	expectWarning(t, warns, "new revision: pools replace their idle machines")
}

// poolRejections is every way a new pool is refused.
var poolRejections = map[string]struct {
	mutate func(*macvirtv1alpha1.MacPool)
	path   string
	want   string
}{
	"name over 52 characters": {func(p *macvirtv1alpha1.MacPool) { p.Name = strings.Repeat("p", 53) }, "metadata.name", "at most 52"},
	"no className":            {func(p *macvirtv1alpha1.MacPool) { p.Spec.ClassName = "" }, "spec.className", "name the MacClass"},
	"malformed namespace":     {func(p *macvirtv1alpha1.MacPool) { p.Spec.Namespace = "CI_Macs" }, "spec.namespace", "RFC 1123"},
	"negative idle":           {func(p *macvirtv1alpha1.MacPool) { p.Spec.Idle, p.Spec.MaxMachines = i32(-1), i32(0) }, "spec.idle", "not be negative"},
	"maxMachines below idle": {func(p *macvirtv1alpha1.MacPool) { p.Spec.Idle, p.Spec.MaxMachines = i32(5), i32(3) },
		"spec.maxMachines", "must be at least spec.idle (5): raise maxMachines or lower idle"},
	"negative maxProvisioning": {func(p *macvirtv1alpha1.MacPool) { p.Spec.MaxProvisioning = -1 }, "spec.maxProvisioning", "at least 1"},
}

func TestValidateMacPool(t *testing.T) {
	class := minimalClass()
	for name, tc := range poolRejections {
		t.Run(name, func(t *testing.T) {
			p := minimalPool()
			DefaultMacPool(p)
			tc.mutate(p)
			errs, _ := ValidateMacPool(p, class)
			expectError(t, errs, tc.path, tc.want)
		})
	}
}

func TestValidateMacPoolWarnings(t *testing.T) {
	p := minimalPool()
	DefaultMacPool(p)
	errs, warns := ValidateMacPool(p, nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	expectWarning(t, warns, `MacClass "sonoma" does not exist yet`)

	class := minimalClass()
	DefaultMacClass(class)
	f := false
	class.Spec.Tenancy.OnDemand = &f
	p.Spec.Idle = i32(0)
	_, warns = ValidateMacPool(p, class)
	expectWarning(t, warns, "claims of this pool wait until idle is raised")
}

func TestValidateMacPoolUpdate(t *testing.T) {
	old := minimalPool()
	DefaultMacPool(old)
	for path, mutate := range map[string]func(*macvirtv1alpha1.MacPool){
		"spec.className": func(p *macvirtv1alpha1.MacPool) { p.Spec.ClassName = "ventura" },
		"spec.namespace": func(p *macvirtv1alpha1.MacPool) { p.Spec.Namespace = "other" },
	} {
		t.Run(path, func(t *testing.T) {
			p := old.DeepCopy()
			mutate(p)
			errs, _ := ValidateMacPoolUpdate(old, p, minimalClass())
			expectError(t, errs, path, "is immutable")
		})
	}
	p := old.DeepCopy()
	p.Spec.Idle, p.Spec.MaxMachines = i32(4), i32(8)
	if errs, _ := ValidateMacPoolUpdate(old, p, minimalClass()); len(errs) != 0 {
		t.Errorf("resizing refused: %v", errs)
	}
}

// tenantClass admits claims from namespaces labelled macvirt.io/tenant=true.
func tenantClass() *macvirtv1alpha1.MacClass {
	class := minimalClass()
	class.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"macvirt.io/tenant": "true"}}
	return class
}

func allowedNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"macvirt.io/tenant": "true"}}}
}

type claimCase struct {
	mutate func(*macvirtv1alpha1.MacClaim)
	env    ClaimEnv
	path   string
	want   string
}

// claimRejections is every way a new claim is refused, with what
// validation looked up.
var claimRejections = map[string]claimCase{
	"neither class nor pool": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = "" }, ClaimEnv{Namespace: allowedNamespace()},
		"spec.className", "set spec.className, spec.poolName, or both"},
	"pool of another class": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName, c.Spec.PoolName = "ventura", "ci" },
		ClaimEnv{Pool: minimalPool(), Class: tenantClass(), Namespace: allowedNamespace()}, "spec.className",
		`MacPool ci holds machines of MacClass "sonoma": set className to "sonoma" or drop it`},
	"a runner set's warm pool, from another namespace": {func(c *macvirtv1alpha1.MacClaim) {
		c.Spec.PoolName, c.Labels = "ci", map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios"}
	}, ClaimEnv{Pool: setPool(), Class: tenantClass(), Namespace: allowedNamespace()}, "spec.poolName",
		"MacPool ci keeps warm Macs for MacRunnerSet ci/ios, and only its runners take them; name another pool, or only a className"},
	"namespace outside the class's tenancy": {func(*macvirtv1alpha1.MacClaim) {},
		ClaimEnv{Class: tenantClass(), Namespace: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}}, "metadata.namespace",
		`namespace "team-a" may not claim MacClass sonoma: its labels do not match the class's spec.tenancy.allowedNamespaces (macvirt.io/tenant=true)`},
	"not an SSH key": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.SSHAuthorizedKeys = []string{testKey, "hunter2"} },
		ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.sshAuthorizedKeys[1]", "not an SSH public key"},
	"two keys in one entry": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.SSHAuthorizedKeys = []string{testKey + "\n" + testKey} },
		ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.sshAuthorizedKeys[0]", "single authorized_keys line"},
	"truncated key": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.SSHAuthorizedKeys = []string{testKey[:40]} },
		ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.sshAuthorizedKeys[0]", "not an SSH public key"},
	"too many keys": {func(c *macvirtv1alpha1.MacClaim) {
		c.Spec.SSHAuthorizedKeys = make([]string, 65)
		for i := range c.Spec.SSHAuthorizedKeys {
			c.Spec.SSHAuthorizedKeys[i] = testKey
		}
	}, ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.sshAuthorizedKeys", "must have at most 64 items"},
	"key too long": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.SSHAuthorizedKeys = []string{strings.Repeat("a", 16385)} },
		ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.sshAuthorizedKeys[0]", "may not be more than 16384"},
	"an access type the class does not allow": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.Access.Type = macvirtv1alpha1.AccessLoadBalancer },
		ClaimEnv{Class: tenantClass(), Namespace: allowedNamespace()}, "spec.access.type",
		"MacClass sonoma allows spec.access.type [ClusterIP] only (its spec.tenancy.allowedAccessTypes)"},
}

func TestValidateMacClaim(t *testing.T) {
	for name, tc := range claimRejections {
		t.Run(name, func(t *testing.T) {
			c := minimalClaim()
			DefaultMacClaim(c)
			tc.mutate(c)
			errs, _ := ValidateMacClaim(c, tc.env)
			if name == "too many keys" {
				// 65 copies of one key also warn; only the count is an error.
				errs = errs[:min(1, len(errs))]
			}
			expectError(t, errs, tc.path, tc.want)
		})
	}
}

func TestValidateMacClaimAcceptsAndWarns(t *testing.T) {
	class := minimalClass()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	c := minimalClaim()
	c.Spec.SSHAuthorizedKeys = []string{testKey, testKey}
	errs, warns := ValidateMacClaim(c, ClaimEnv{Class: class, Namespace: ns})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	expectWarning(t, warns, "spec.sshAuthorizedKeys[1] is the same key as spec.sshAuthorizedKeys[0]")

	_, warns = ValidateMacClaim(minimalClaim(), ClaimEnv{Namespace: ns})
	expectWarning(t, warns, `MacClass "sonoma" does not exist yet`)

	byPool := minimalClaim()
	byPool.Spec.ClassName, byPool.Spec.PoolName = "", "ci"
	_, warns = ValidateMacClaim(byPool, ClaimEnv{Namespace: ns})
	expectWarning(t, warns, `MacPool "ci" does not exist yet`)

	runner := minimalClaim()
	runner.Namespace, runner.Spec.PoolName, runner.Labels = "ci", "ci", map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios"}
	if errs, _ := ValidateMacClaim(runner, ClaimEnv{Pool: setPool(), Class: class}); len(errs) != 0 {
		t.Errorf("the set's own runner naming its pool: %v", errs)
	}

	both := minimalClaim()
	both.Spec.PoolName = "ci"
	if errs, warns := ValidateMacClaim(both, ClaimEnv{Pool: minimalPool(), Class: class, Namespace: ns}); len(errs) != 0 || len(warns) != 0 {
		t.Errorf("a claim naming a pool and its class: errors %v, warnings %q", errs, warns)
	}
}

// setPool is the warm pool runner set ci/ios keeps.
func setPool() *macvirtv1alpha1.MacPool {
	p := minimalPool()
	p.Labels = map[string]string{macvirtv1alpha1.LabelRunnerSet: "ios", macvirtv1alpha1.LabelRunnerSetNamespace: "ci"}
	return p
}

func TestValidateMacClaimUpdate(t *testing.T) {
	old := minimalClaim()
	DefaultMacClaim(old)
	for name, tc := range map[string]struct {
		mutate func(*macvirtv1alpha1.MacClaim)
		bound  bool
		path   string
		want   string
	}{
		"className":                {func(c *macvirtv1alpha1.MacClaim) { c.Spec.ClassName = "ventura" }, false, "spec.className", "is immutable"},
		"poolName":                 {func(c *macvirtv1alpha1.MacClaim) { c.Spec.PoolName = "ci" }, false, "spec.poolName", "is immutable"},
		"reclaimPolicy once bound": {func(c *macvirtv1alpha1.MacClaim) { c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain }, true, "spec.reclaimPolicy", "was bound with Delete"},
		"a bad key":                {func(c *macvirtv1alpha1.MacClaim) { c.Spec.SSHAuthorizedKeys = []string{"nope"} }, false, "spec.sshAuthorizedKeys[0]", "not an SSH public key"},
	} {
		t.Run(name, func(t *testing.T) {
			o := old.DeepCopy()
			if tc.bound {
				o.Status.MachineRef = &macvirtv1alpha1.ObjectRef{Namespace: "macvirt-pools", Name: "ci-0", UID: "u"}
			}
			c := o.DeepCopy()
			tc.mutate(c)
			expectError(t, ValidateMacClaimUpdate(o, c), tc.path, tc.want)
		})
	}
	c := old.DeepCopy()
	c.Spec.ReclaimPolicy = macvirtv1alpha1.ReclaimRetain
	c.Spec.SSHAuthorizedKeys = []string{testKey}
	if errs := ValidateMacClaimUpdate(old, c); len(errs) != 0 {
		t.Errorf("changing policy before binding, or keys, refused: %v", errs)
	}
}

// goodIdentity is a well-formed SMBIOS identity.
func goodIdentity() macvirtv1alpha1.MachineSMBIOS {
	return macvirtv1alpha1.MachineSMBIOS{SerialNumber: "C02XK1ZDHX87", BoardSerial: "C02123ABCDEHX87AB", UUID: "0b5a3c2e-8f7d-4e1a-9c3b-2d4e6f8a0b1c"}
}

type machineCase struct {
	mutate func(*macvirtv1alpha1.MacMachine)
	users  map[string]string
	path   string
	want   string
}

// machineRejections is every way a new machine (with goodIdentity unless
// the case changes it) is refused; users are the machines already using
// identity values.
var machineRejections = map[string]machineCase{
	"name over 63 characters": {func(m *macvirtv1alpha1.MacMachine) { m.Name = strings.Repeat("m", 64) }, nil, "metadata.name", "at most 63"},
	"no className":            {func(m *macvirtv1alpha1.MacMachine) { m.Spec.ClassName = "" }, nil, "spec.className", "name the MacClass"},
	"lower-case serial": {func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS.SerialNumber = "c02xk1zdhx87" }, nil,
		"spec.smbios.serialNumber", "12 upper-case letters and digits"},
	"short board serial": {func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS.BoardSerial = "C021" }, nil,
		"spec.smbios.boardSerial", "17 upper-case letters and digits"},
	"malformed UUID": {func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS.UUID = "not-a-uuid" }, nil, "spec.smbios.uuid", "must be a UUID"},
	"partial identity": {func(m *macvirtv1alpha1.MacMachine) { m.Spec.SMBIOS.BoardSerial = "" }, nil,
		"spec.smbios.boardSerial", "drop spec.smbios to have one generated"},
	"serial in use": {func(*macvirtv1alpha1.MacMachine) {}, map[string]string{"C02XK1ZDHX87": "team-b/m-7"},
		"spec.smbios.serialNumber", "already used by MacMachine team-b/m-7"},
	"UUID in use": {func(*macvirtv1alpha1.MacMachine) {}, map[string]string{"0b5a3c2e-8f7d-4e1a-9c3b-2d4e6f8a0b1c": "team-b/m-7"},
		"spec.smbios.uuid", "already used by MacMachine team-b/m-7"},
}

func TestValidateMacMachine(t *testing.T) {
	for name, tc := range machineRejections {
		t.Run(name, func(t *testing.T) {
			m := minimalMachine()
			id := goodIdentity()
			m.Spec.SMBIOS = &id
			tc.mutate(m)
			errs, _ := ValidateMacMachine(m, MachineEnv{Class: minimalClass(), SMBIOSUsers: tc.users})
			expectError(t, errs, tc.path, tc.want)
		})
	}
	_, warns := ValidateMacMachine(minimalMachine(), MachineEnv{})
	expectWarning(t, warns, `MacClass "sonoma" does not exist yet`)
}

// A machine made by hand obeys its class's tenancy as a claim would; the
// operator's own (for a pool, or for a claim that was checked) is not held
// to it.
func TestAMachineMadeByHandObeysItsClassesTenancy(t *testing.T) {
	class := minimalClass()
	class.Spec.Tenancy.AllowedNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"macvirt.io/tenant": "true"}}
	m := minimalMachine()
	id := goodIdentity()
	m.Spec.SMBIOS = &id
	outsider := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.Namespace}}
	errs, _ := ValidateMacMachine(m, MachineEnv{Class: class, Namespace: outsider})
	expectError(t, errs, "metadata.namespace", "a machine made by hand obeys its class's tenancy")
	if errs, _ := ValidateMacMachine(m, MachineEnv{Class: class, Namespace: outsider, ByOperator: true}); len(errs) != 0 {
		t.Errorf("the operator's own machine was refused: %v", errs)
	}
	tenant := outsider.DeepCopy()
	tenant.Labels = map[string]string{"macvirt.io/tenant": "true"}
	if errs, _ := ValidateMacMachine(m, MachineEnv{Class: class, Namespace: tenant}); len(errs) != 0 {
		t.Errorf("a machine of an allowed namespace was refused: %v", errs)
	}
}

func TestAMacOSReleaseDefaultsItsHardwareAndChecksOnlyWhatItKnows(t *testing.T) {
	for release, info := range macvirtv1alpha1.MacOSReleases {
		t.Run(string(release), func(t *testing.T) {
			c := minimalClass()
			c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: release}
			DefaultMacClass(c)
			h := c.Spec.Hardware
			if h.SMBIOS.ProductName != info.ProductName || h.CPUModel != info.CPUModel || h.NICModel != info.NICModel {
				t.Fatalf("defaults %s/%s/%s, want the table's %s/%s/%s", h.SMBIOS.ProductName, h.CPUModel, h.NICModel,
					info.ProductName, info.CPUModel, info.NICModel)
			}
			if errs, _ := ValidateMacClass(c, ClassEnv{}); len(errs) != 0 {
				t.Fatalf("a release's own defaults are refused: %v", errs)
			}
		})
	}
	g := minimalClass()
	g.Spec.Hardware.SMBIOS.ProductName, g.Spec.Hardware.CPUModel = "iMac17,1", macvirtv1alpha1.CPUModelPenryn
	DefaultMacClass(g)
	if errs, _ := ValidateMacClass(g, ClassEnv{}); len(errs) != 0 {
		t.Fatalf("without spec.macOS.release nothing is checked: %v", errs)
	}
	if g.Spec.Hardware.NICModel != macvirtv1alpha1.NICModelVmxnet3 {
		t.Fatalf("without a release the NIC defaults to vmxnet3, got %s", g.Spec.Hardware.NICModel)
	}
	custom := minimalClass()
	custom.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSTahoe}
	custom.Spec.Hardware.SMBIOS.ProductName = "Mac-Custom1,1"
	DefaultMacClass(custom)
	if errs, _ := ValidateMacClass(custom, ClassEnv{}); len(errs) != 0 {
		t.Fatalf("a model the table does not know is not refused: %v", errs)
	}
}

func TestChangingTheReleaseRedefaultsWhatTheWebhookWrote(t *testing.T) {
	old := minimalClass()
	DefaultMacClass(old) // a class from before spec.macOS: iMacPro1,1, vmxnet3, Haswell-noTSX stored
	tahoe := func(c *macvirtv1alpha1.MacClass) *macvirtv1alpha1.MacClass {
		c = c.DeepCopy()
		c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: macvirtv1alpha1.MacOSTahoe}
		return c
	}
	c := tahoe(old)
	DefaultMacClassUpdate(old, c)
	if h := c.Spec.Hardware; h.SMBIOS.ProductName != "MacPro7,1" || h.NICModel != macvirtv1alpha1.NICModelVirtio || h.CPUModel != macvirtv1alpha1.CPUModelHaswellNoTSX {
		t.Fatalf("moving to 26 keeps %s/%s/%s; want Tahoe's defaults", h.SMBIOS.ProductName, h.NICModel, h.CPUModel)
	}
	if errs, warns := ValidateMacClass(c, ClassEnv{}); len(errs) != 0 || len(warns) != 0 {
		t.Fatalf("the re-defaulted class is refused or warned about: %v %v", errs, warns)
	}

	chosen := old.DeepCopy()
	chosen.Spec.Hardware.SMBIOS.ProductName = "iMac20,1"
	c = tahoe(chosen)
	DefaultMacClassUpdate(chosen, c)
	if c.Spec.Hardware.SMBIOS.ProductName != "iMac20,1" {
		t.Fatalf("an admin's model is replaced: %s", c.Spec.Hardware.SMBIOS.ProductName)
	}

	c = tahoe(old)
	c.Spec.Hardware.NICModel = macvirtv1alpha1.NICModelE1000
	DefaultMacClassUpdate(old, c)
	if c.Spec.Hardware.NICModel != macvirtv1alpha1.NICModelE1000 {
		t.Fatalf("a NIC set in the same update is replaced: %s", c.Spec.Hardware.NICModel)
	}

	same := old.DeepCopy()
	same.Spec.Description = "edited"
	DefaultMacClassUpdate(old, same)
	if same.Spec.Hardware != old.Spec.Hardware {
		t.Fatalf("an update that keeps the release changes the hardware: %+v", same.Spec.Hardware)
	}

	c = tahoe(old)
	c.Spec.Hardware.NICModel = macvirtv1alpha1.NICModelVmxnet3
	_, warns := ValidateMacClass(func() *macvirtv1alpha1.MacClass { DefaultMacClassUpdate(nil, c); return c }(), ClassEnv{})
	if len(warns) != 1 || !strings.Contains(warns[0], "vmxnet3 is not known to work on macOS 26") {
		t.Fatalf("vmxnet3 on 26 gives no warning: %v", warns)
	}
}

// A claim asking more than its class's cap is admitted with a warning that
// says what it gets; within the cap, or under no cap, it hears nothing.
func TestClaimLifetimeOverTheClassCapIsWarnedOf(t *testing.T) {
	class := tenantClass()
	class.Spec.Tenancy.MaxClaimLifetime = &metav1.Duration{Duration: 2 * time.Hour}
	for _, tc := range []struct {
		asked time.Duration
		class *macvirtv1alpha1.MacClass
		warn  string
	}{
		{asked: 3 * time.Hour, class: class, warn: "spec.lifetime 3h0m0s is more than MacClass " + class.Name + "'s tenancy.maxClaimLifetime: the claim keeps its machine 2h0m0s"},
		{asked: time.Hour, class: class},
		{asked: 3 * time.Hour, class: tenantClass()},
	} {
		c := minimalClaim()
		c.Namespace = "team-a"
		c.Spec.Lifetime = &metav1.Duration{Duration: tc.asked}
		errs, warns := ValidateMacClaim(c, ClaimEnv{Class: tc.class, Namespace: allowedNamespace()})
		if len(errs) > 0 {
			t.Errorf("lifetime %s: refused: %v", tc.asked, errs)
		}
		var got string
		for _, w := range warns {
			if strings.Contains(w, "lifetime") {
				got = w
			}
		}
		if got != tc.warn {
			t.Errorf("lifetime %s: warning %q, want %q", tc.asked, got, tc.warn)
		}
	}
}
