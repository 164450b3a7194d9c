package v1alpha1

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// ClassEnv is what class validation knows about the operator.
type ClassEnv struct {
	// EmulatorOverride is true when the operator runs with --emulator-path,
	// i.e. machines use a QEMU the admin chose instead of KubeVirt's.
	EmulatorOverride bool
}

// Thresholds of the warnings on legal but risky values.
var (
	minSafeShutdownGrace    = time.Minute
	minSafeHeartbeatTimeout = 30 * time.Second
	minSafeBootTimeout      = 5 * time.Minute
	minSafeImageSize        = resource.MustParse("64Gi")
	minMemory               = resource.MustParse("4Gi")
	// memoryBlock is KubeVirt's memory hotplug block: virt-api refuses a
	// VM whose guest memory, or maxGuest, is not a multiple of it
	// (pkg/liveupdate/memory, ValidateLiveUpdateMemory).
	memoryBlock int64 = 2 << 20
)

// ValidateMacClass returns what is wrong with a class, each error naming the
// field and the fix, and warnings for legal values that are likely mistakes.
func ValidateMacClass(c *macvirtv1alpha1.MacClass, env ClassEnv) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	s := &c.Spec
	var errs field.ErrorList
	var warns []string

	res := spec.Child("resources")
	if s.Resources.CPU != 0 && (s.Resources.CPU < 2 || s.Resources.CPU > 64) {
		errs = append(errs, field.Invalid(res.Child("cpu"), s.Resources.CPU, "must be between 2 and 64 vCPUs"))
	}
	if m := s.Resources.Memory; m != nil && m.Cmp(minMemory) < 0 {
		errs = append(errs, field.Invalid(res.Child("memory"), m.String(), "must be at least 4Gi: macOS does not boot with less"))
	} else if m != nil && m.Value()%memoryBlock != 0 {
		errs = append(errs, field.Invalid(res.Child("memory"), m.String(),
			"must be a whole number of 2Mi blocks (KubeVirt refuses other guest memory when maxGuest is set, as for every machine): use 8Gi, 8192Mi or similar"))
	}

	errs = append(errs, validateImage(spec, s, &warns)...)
	errs = append(errs, validateSize(spec.Child("image", "size"), s.Image.Size)...)
	if sz := s.Image.Size; sz != nil && sz.Sign() > 0 && sz.Cmp(minSafeImageSize) < 0 {
		warns = append(warns, fmt.Sprintf("spec.image.size %s is under %s: macOS updates need room, and a clone fails when the source is larger",
			sz.String(), minSafeImageSize.String()))
	}
	if s.OnHosts() {
		errs = append(errs, validateOnHosts(spec, s)...)
	} else {
		errs = append(errs, validateDiskSource(spec.Child("bootloader"), &s.Bootloader.DiskSource, &warns)...)
		errs = append(errs, validateSize(spec.Child("bootloader", "size"), s.Bootloader.Size)...)
		if s.Image.PullPolicy != "" {
			errs = append(errs, field.Forbidden(spec.Child("image", "pullPolicy"),
				"is for Virtualization classes (a Mac's tool pulls their image); a KubeVirt class's image is CDI's: remove it, or use image.refresh"))
		}
		if s.Lifecycle.AfterShutdownGracePeriod == macvirtv1alpha1.AfterGracePowerOff {
			errs = append(errs, field.Forbidden(spec.Child("lifecycle", "afterShutdownGracePeriod"),
				"PowerOff is for Virtualization classes: on KubeVirt, KubeVirt forces the VM off after shutdownGracePeriod itself; remove it"))
		}
	}

	errs = append(errs, validateHardware(spec.Child("hardware"), &s.Hardware, env, &warns)...)
	// What the class's macOS release is known not to boot with, on the
	// hardware as it will be rendered (unset fields take its defaults).
	if s.Release() == macvirtv1alpha1.MacOSTahoe && s.EffectiveHardware().NICModel == macvirtv1alpha1.NICModelVmxnet3 {
		warns = append(warns, "spec.hardware.nicModel vmxnet3 is not known to work on macOS 26 (Tahoe); virtio, its default, is (docs/macos-releases.md)")
	}
	for _, p := range macvirtv1alpha1.ReleaseHardwareProblems(s.Release(), s.EffectiveHardware()) {
		path := spec.Child("hardware")
		for _, part := range strings.Split(p.Field, ".") {
			path = path.Child(part)
		}
		errs = append(errs, field.Invalid(path, p.Value, p.Message))
	}
	errs = append(errs, validatePlacement(spec.Child("placement"), &s.Placement, &warns)...)
	errs = append(errs, validateLifecycle(spec.Child("lifecycle"), &s.Lifecycle, &warns)...)

	if t := s.Access.DefaultType; t != "" && !s.Tenancy.AllowsAccess(t) {
		errs = append(errs, field.Invalid(spec.Child("access", "defaultType"), t,
			fmt.Sprintf("must be one of spec.tenancy.allowedAccessTypes %v: add %s there, or pick one of those", s.Tenancy.AccessTypes(), t)))
	}
	errs = append(errs, validateBootstrap(spec.Child("bootstrap"), s.Bootstrap, true)...)
	if sel := s.Tenancy.AllowedNamespaces; sel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{},
			spec.Child("tenancy", "allowedNamespaces"))...)
	}
	return errs, warns
}

// ValidateMacClassUpdate validates the new class and warns when the change
// gives the class a new revision, which replaces its pools' idle machines.
func ValidateMacClassUpdate(old, c *macvirtv1alpha1.MacClass, env ClassEnv) (field.ErrorList, []string) {
	errs, warns := ValidateMacClass(c, env)
	if len(errs) == 0 && render.ClassRevision(old) != render.ClassRevision(c) {
		warns = append(warns, fmt.Sprintf("this change gives MacClass %s a new revision: pools replace their idle machines one by one; "+
			"bound machines keep running the old revision", c.Name))
	}
	return errs, warns
}

// validateImage checks the system disk's source: blank for an installer
// class and only there; a refresh schedule CDI can parse; an installer's
// recovery DataSource.
func validateImage(spec *field.Path, s *macvirtv1alpha1.MacClassSpec, warns *[]string) field.ErrorList {
	img := spec.Child("image")
	blank := s.Image.Source != nil && s.Image.Source.Blank != nil
	var errs field.ErrorList
	switch {
	case s.OnHosts():
		// Said once, by validateOnHosts.
		if s.Image.SourceRef == nil && s.Image.Source != nil {
			errs = append(errs, validateDiskSource(img, &s.Image.DiskSource, warns)...)
		}
	case s.Installer != nil && !blank:
		errs = append(errs, field.Invalid(img.Child("source"), "not blank",
			"an installer class (spec.installer) installs macOS onto a blank disk: set image.source to {blank: {}}"))
	case s.Installer == nil && blank:
		errs = append(errs, field.Invalid(img.Child("source", "blank"), "{}",
			"a blank system disk has no macOS on it: set spec.installer.recoverySourceRef to install macOS from recovery over VNC, "+
				"or give the image a source (a DataSource or registry image with macOS and the agent; docs/golden-image.md)"))
	case blank:
		if s.Image.SourceRef != nil {
			errs = append(errs, field.Invalid(img.Child("sourceRef"), s.Image.SourceRef.Name, "set exactly one of source or sourceRef, not both"))
		}
	default:
		errs = append(errs, validateDiskSource(img, &s.Image.DiskSource, warns)...)
	}
	if s.Installer != nil {
		ip := spec.Child("installer")
		ref := s.Installer.RecoverySourceRef
		if ref.Kind != cdiv1.DataVolumeDataSource {
			errs = append(errs, field.NotSupported(ip.Child("recoverySourceRef", "kind"), ref.Kind, []string{cdiv1.DataVolumeDataSource}))
		}
		errs = append(errs, dnsSubdomain(ip.Child("recoverySourceRef", "name"), ref.Name)...)
		if ref.Namespace == nil || *ref.Namespace == "" {
			errs = append(errs, field.Required(ip.Child("recoverySourceRef", "namespace"), "name the namespace of the recovery DataSource (macvirt-images, say)"))
		} else {
			errs = append(errs, dnsLabel(ip.Child("recoverySourceRef", "namespace"), *ref.Namespace)...)
		}
		errs = append(errs, validateSize(ip.Child("recoverySize"), s.Installer.RecoverySize)...)
	}
	if r := s.Image.Refresh; r != nil {
		if s.Image.Source == nil || s.Image.Source.Registry == nil {
			errs = append(errs, field.Invalid(img, "refresh", "image.refresh keeps a registry image current: set image.source.registry, or remove refresh"))
		}
		if _, err := cron.ParseStandard(r.Schedule); err != nil {
			errs = append(errs, field.Invalid(img.Child("refresh", "schedule"), r.Schedule,
				"not a cron schedule CDI can parse ("+err.Error()+"): five fields, such as \"0 */6 * * *\""))
		}
	}
	return errs
}

// validateOnHosts checks what a Virtualization class needs: an OCI image
// the host agents' tool can pull, no OpenCore disk, and a valid host
// selector.
func validateOnHosts(spec *field.Path, s *macvirtv1alpha1.MacClassSpec) field.ErrorList {
	var errs field.ErrorList
	if s.Bootloader != (macvirtv1alpha1.BootloaderSpec{}) {
		errs = append(errs, field.Forbidden(spec.Child("bootloader"),
			"a Virtualization class has no bootloader: Apple's Virtualization framework boots macOS itself; remove it"))
	}
	switch {
	case s.Image.SourceRef != nil:
		errs = append(errs, field.Forbidden(spec.Child("image", "sourceRef"),
			"CDI DataSources do not reach a Mac: give the VM image as image.source.registry.url"))
	case s.VMImage() == "":
		errs = append(errs, field.Required(spec.Child("image", "source", "registry", "url"),
			"a Virtualization class's VM image is an OCI reference tart or lume can pull, such as docker://ghcr.io/cirruslabs/macos-sequoia-base:latest"))
	default:
		if err := macvirtv1alpha1.CheckVMImage(s.VMImage()); err != nil {
			errs = append(errs, field.Invalid(spec.Child("image", "source", "registry", "url"), *s.Image.Source.Registry.URL, err.Error()))
		}
	}
	if s.Image.Refresh != nil && s.Image.Refresh.ImportsToKeep != nil {
		errs = append(errs, field.Forbidden(spec.Child("image", "refresh", "importsToKeep"),
			"a Mac's tool keeps one copy of each tag it pulls, not CDI's imports: remove importsToKeep (refresh.schedule is when the hosts pull the tag again)"))
	}
	if s.Installer != nil {
		errs = append(errs, field.Forbidden(spec.Child("installer"), "installer classes run on KubeVirt only: remove installer, or runtime"))
	}
	// A VM behind its Mac's NAT has no address a Service could route to:
	// tenants reach it through the tunnel (kubectl mac), which ClusterIP
	// access is. (A default type outside these is refused as for any
	// class.)
	for i, t := range s.Tenancy.AllowedAccessTypes {
		if t != macvirtv1alpha1.AccessClusterIP {
			errs = append(errs, field.NotSupported(spec.Child("tenancy", "allowedAccessTypes").Index(i), t,
				[]string{string(macvirtv1alpha1.AccessClusterIP) + " (a Mac on an Apple-silicon host sits behind its NAT; kubectl mac reaches it through the tunnel)"}))
		}
	}
	if sel := s.Placement.HostSelector; sel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{},
			spec.Child("placement", "hostSelector"))...)
	}
	return errs
}

func validateSize(p *field.Path, q *resource.Quantity) field.ErrorList {
	if q != nil && q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(p, q.String(), "must be a positive size such as 128Gi")}
	}
	return nil
}

// supportedSources names the CDI sources a class may clone every machine from.
const supportedSources = "http, registry, s3, gcs, pvc or snapshot"

// validateDiskSource checks that a disk has exactly one source a machine's
// DataVolume can be created from, and that it is complete.
func validateDiskSource(p *field.Path, d *macvirtv1alpha1.DiskSource, warns *[]string) field.ErrorList {
	var errs field.ErrorList
	switch {
	case d.Source == nil && d.SourceRef == nil:
		return field.ErrorList{field.Required(p.Child("source"),
			"set source (one of "+supportedSources+") or sourceRef (a CDI DataSource)")}
	case d.Source != nil && d.SourceRef != nil:
		return field.ErrorList{field.Invalid(p.Child("sourceRef"), d.SourceRef.Name, "set exactly one of source or sourceRef, not both")}
	case d.SourceRef != nil:
		ref := d.SourceRef
		rp := p.Child("sourceRef")
		if ref.Kind != cdiv1.DataVolumeDataSource {
			errs = append(errs, field.NotSupported(rp.Child("kind"), ref.Kind, []string{cdiv1.DataVolumeDataSource}))
		}
		errs = append(errs, dnsSubdomain(rp.Child("name"), ref.Name)...)
		if ref.Namespace == nil || *ref.Namespace == "" {
			*warns = append(*warns, fmt.Sprintf("%s.namespace is empty: each machine looks for DataSource %q in its own namespace; "+
				"set the namespace of the golden image", rp, ref.Name))
		} else {
			errs = append(errs, dnsLabel(rp.Child("namespace"), *ref.Namespace)...)
		}
	default:
		errs = append(errs, validateCDISource(p.Child("source"), d.Source)...)
	}
	if d.StorageClassName != nil && *d.StorageClassName != "" {
		errs = append(errs, dnsSubdomain(p.Child("storageClassName"), *d.StorageClassName)...)
	}
	return errs
}

// validateCDISource accepts exactly one source that every machine's disk can
// be imported or cloned from.
func validateCDISource(p *field.Path, s *cdiv1.DataVolumeSource) field.ErrorList {
	var set []string
	for name, on := range map[string]bool{
		"http": s.HTTP != nil, "s3": s.S3 != nil, "gcs": s.GCS != nil, "registry": s.Registry != nil, "pvc": s.PVC != nil,
		"snapshot": s.Snapshot != nil, "upload": s.Upload != nil, "blank": s.Blank != nil, "imageio": s.Imageio != nil, "vddk": s.VDDK != nil,
	} {
		if on {
			set = append(set, name)
		}
	}
	switch len(set) {
	case 0:
		return field.ErrorList{field.Required(p, "name one CDI source: "+supportedSources)}
	case 1:
	default:
		slices.Sort(set)
		return field.ErrorList{field.Invalid(p, strings.Join(set, ", "), "name exactly one CDI source, not "+fmt.Sprint(len(set)))}
	}
	switch {
	case s.HTTP != nil:
		return validURL(p.Child("http", "url"), s.HTTP.URL, "http", "https")
	case s.S3 != nil:
		return validURL(p.Child("s3", "url"), s.S3.URL, "http", "https", "s3")
	case s.GCS != nil:
		return validURL(p.Child("gcs", "url"), s.GCS.URL, "gs", "https")
	case s.Registry != nil:
		return validateRegistry(p.Child("registry"), s.Registry)
	case s.PVC != nil:
		return append(dnsLabel(p.Child("pvc", "namespace"), s.PVC.Namespace), dnsSubdomain(p.Child("pvc", "name"), s.PVC.Name)...)
	case s.Snapshot != nil:
		return append(dnsLabel(p.Child("snapshot", "namespace"), s.Snapshot.Namespace),
			dnsSubdomain(p.Child("snapshot", "name"), s.Snapshot.Name)...)
	}
	return field.ErrorList{field.NotSupported(p, set[0], strings.Split(strings.ReplaceAll(supportedSources, " or ", ", "), ", "))}
}

func validateRegistry(p *field.Path, r *cdiv1.DataVolumeSourceRegistry) field.ErrorList {
	hasURL, hasStream := r.URL != nil && *r.URL != "", r.ImageStream != nil && *r.ImageStream != ""
	switch {
	case hasURL == hasStream:
		return field.ErrorList{field.Required(p.Child("url"), "set exactly one of url (docker://... or oci-archive://...) or imageStream")}
	case hasURL:
		return validURL(p.Child("url"), *r.URL, "docker", "oci-archive")
	}
	return nil
}

// validURL checks that raw is an absolute URL with one of the schemes.
func validURL(p *field.Path, raw string, schemes ...string) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(p, fmt.Sprintf("set the URL of the image (%s://...)", schemes[0]))}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(p, raw, "not a URL: "+err.Error())}
	}
	for _, s := range schemes {
		if u.Scheme == s && (u.Host != "" || u.Opaque != "" || u.Path != "") {
			return nil
		}
	}
	return field.ErrorList{field.Invalid(p, raw, fmt.Sprintf("must be an absolute URL with scheme %s", strings.Join(schemes, ", ")))}
}

func validateHardware(p *field.Path, h *macvirtv1alpha1.HardwareSpec, env ClassEnv, warns *[]string) field.ErrorList {
	var errs field.ErrorList
	smc := p.Child("smc")
	switch h.SMC.Mode {
	case macvirtv1alpha1.SMCModeAppleSMC:
		if h.SMC.OSKSecretRef == nil {
			errs = append(errs, field.Required(smc.Child("oskSecretRef"),
				"mode AppleSMC needs the Secret key holding the OSK string; set oskSecretRef {namespace, name, key} or use mode VirtualSMC"))
		} else {
			ref := h.SMC.OSKSecretRef
			errs = append(errs, dnsLabel(smc.Child("oskSecretRef", "namespace"), ref.Namespace)...)
			errs = append(errs, dnsSubdomain(smc.Child("oskSecretRef", "name"), ref.Name)...)
			if ref.Key == "" {
				errs = append(errs, field.Required(smc.Child("oskSecretRef", "key"), "name the key of the Secret that holds the OSK string"))
			}
		}
		if !env.EmulatorOverride {
			*warns = append(*warns, "spec.hardware.smc.mode AppleSMC needs a QEMU with the isa-applesmc device, which KubeVirt's QEMU lacks: "+
				"machines of this class start only if the operator runs with --emulator-path; VirtualSMC works with any QEMU")
		}
	case macvirtv1alpha1.SMCModeVirtualSMC, "":
		if h.SMC.OSKSecretRef != nil {
			*warns = append(*warns, "spec.hardware.smc.oskSecretRef is ignored in mode VirtualSMC")
		}
	default:
		errs = append(errs, field.NotSupported(smc.Child("mode"), h.SMC.Mode,
			[]macvirtv1alpha1.SMCMode{macvirtv1alpha1.SMCModeVirtualSMC, macvirtv1alpha1.SMCModeAppleSMC}))
	}
	return errs
}

func validatePlacement(p *field.Path, pl *macvirtv1alpha1.PlacementSpec, warns *[]string) field.ErrorList {
	errs := metav1validation.ValidateLabels(pl.NodeSelector, p.Child("nodeSelector"))
	for i, t := range pl.Tolerations {
		errs = append(errs, validateToleration(p.Child("tolerations").Index(i), t)...)
	}
	if _, apple := pl.NodeSelector[macvirtv1alpha1.LabelAppleHardware]; !apple && pl.Affinity == nil {
		*warns = append(*warns, fmt.Sprintf("spec.placement selects no %s node and sets no affinity: machines may be scheduled on "+
			"hardware that is not Apple's, where macOS may not run (and its licence does not allow it)", macvirtv1alpha1.LabelAppleHardware))
	}
	return errs
}

func validateToleration(p *field.Path, t corev1.Toleration) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty when operator is Exists"))
		}
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "an empty key tolerates every taint only with operator Exists"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator,
			[]corev1.TolerationOperator{corev1.TolerationOpExists, corev1.TolerationOpEqual}))
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect,
			[]corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}))
	}
	return errs
}

// lifecycleBounds are the legal ranges of the class timeouts (the CRD's CEL
// rules carry the same).
var lifecycleBounds = []struct {
	name     string
	min, max time.Duration
	safe     time.Duration
	risk     string
}{
	{"shutdownGracePeriod", time.Second, 24 * time.Hour, minSafeShutdownGrace,
		"macOS may not finish shutting down before KubeVirt forces the VM off, which can corrupt APFS; the default is 5m"},
	{"bootTimeout", time.Minute, 24 * time.Hour, minSafeBootTimeout,
		"a first boot or an update can take longer, and the machine would be marked Failed; the default is 20m"},
	{"heartbeatTimeout", 10 * time.Second, time.Hour, minSafeHeartbeatTimeout,
		"a short network hiccup would make machines not Ready; the default is 2m"},
}

func validateLifecycle(p *field.Path, l *macvirtv1alpha1.LifecycleSpec, warns *[]string) field.ErrorList {
	var errs field.ErrorList
	values := map[string]*time.Duration{}
	for name, d := range map[string]*metav1.Duration{"shutdownGracePeriod": l.ShutdownGracePeriod, "bootTimeout": l.BootTimeout,
		"heartbeatTimeout": l.HeartbeatTimeout} {
		if d != nil {
			v := d.Duration
			values[name] = &v
		}
	}
	for _, b := range lifecycleBounds {
		v := values[b.name]
		switch {
		case v == nil:
		case *v < b.min || *v > b.max:
			errs = append(errs, field.Invalid(p.Child(b.name), v.String(), fmt.Sprintf("must be between %s and %s", b.min, b.max)))
		case *v < b.safe:
			*warns = append(*warns, fmt.Sprintf("spec.lifecycle.%s %s is under %s: %s", b.name, v, b.safe, b.risk))
		}
	}
	return errs
}

func dnsLabel(p *field.Path, v string) field.ErrorList {
	return dnsName(p, v, validation.IsDNS1123Label)
}

func dnsSubdomain(p *field.Path, v string) field.ErrorList {
	return dnsName(p, v, validation.IsDNS1123Subdomain)
}

// dnsName requires v and reports every way check finds it malformed.
func dnsName(p *field.Path, v string, check func(string) []string) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	for _, msg := range check(v) {
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}
