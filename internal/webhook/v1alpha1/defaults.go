// Package v1alpha1 holds macvirt's admission webhooks. The decisions are
// pure functions (Default*, Validate*) that take everything they need as
// arguments and return field.ErrorLists and warnings; the webhook types in
// the *_webhook.go files only gather what those functions need (a class, a
// pool, a namespace's labels) and hand the result to controller-runtime.
package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// DefaultMacClass fills every unset field of a class with the default of
// the API: the same values the CRD schema defaults carry, so an object is
// the same whichever of the two defaulted it. It is idempotent.
func DefaultMacClass(c *macvirtv1alpha1.MacClass) {
	s := &c.Spec
	if s.Resources.CPU == 0 {
		s.Resources.CPU = macvirtv1alpha1.DefaultCPU
	}
	if s.Resources.Memory == nil {
		q := macvirtv1alpha1.DefaultMemory.DeepCopy()
		s.Resources.Memory = &q
	}
	if s.Image.Size == nil {
		q := macvirtv1alpha1.DefaultImageSize.DeepCopy()
		s.Image.Size = &q
	}
	if !s.OnHosts() && s.Bootloader.Size == nil {
		q := macvirtv1alpha1.DefaultBootloaderSize.DeepCopy()
		s.Bootloader.Size = &q
	}
	s.Hardware = s.EffectiveHardware()
	if s.Placement.NodeSelector == nil {
		s.Placement.NodeSelector = map[string]string{macvirtv1alpha1.LabelAppleHardware: "true"}
	}
	if s.Placement.Tolerations == nil {
		s.Placement.Tolerations = []corev1.Toleration{{Key: macvirtv1alpha1.LabelAppleHardware,
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	}
	setDuration(&s.Lifecycle.ShutdownGracePeriod, macvirtv1alpha1.DefaultShutdownGracePeriod)
	setDuration(&s.Lifecycle.BootTimeout, macvirtv1alpha1.DefaultBootTimeout)
	setDuration(&s.Lifecycle.HeartbeatTimeout, macvirtv1alpha1.DefaultHeartbeatTimeout)
	setDuration(&s.Lifecycle.DrainGracePeriod, macvirtv1alpha1.DefaultDrainGracePeriod)
	if s.Tenancy.AllowedNamespaces == nil {
		s.Tenancy.AllowedNamespaces = &metav1.LabelSelector{}
	}
	if s.Tenancy.OnDemand == nil {
		t := true
		s.Tenancy.OnDemand = &t
	}
	if len(s.Tenancy.AllowedAccessTypes) == 0 {
		s.Tenancy.AllowedAccessTypes = []macvirtv1alpha1.AccessType{macvirtv1alpha1.AccessClusterIP}
	}
	if s.Tenancy.AllowRetain == nil {
		t := true
		s.Tenancy.AllowRetain = &t
	}
}

// DefaultMacClassUpdate defaults a class on update. When the update changes
// the class's macOS release, each release-dependent hardware field
// (cpuModel, nicModel, smbios.productName) that still holds the old
// release's default, and that this update leaves as it was, is defaulted
// again for the new release: a value the webhook wrote is not mistaken for
// the admin's choice. Then DefaultMacClass.
func DefaultMacClassUpdate(old, c *macvirtv1alpha1.MacClass) {
	if old != nil && old.Spec.Release() != c.Spec.Release() {
		was, h, prev := macvirtv1alpha1.ReleaseDefaults(old.Spec.Release()), &c.Spec.Hardware, &old.Spec.Hardware
		if h.CPUModel == prev.CPUModel && prev.CPUModel == was.CPUModel {
			h.CPUModel = ""
		}
		if h.NICModel == prev.NICModel && prev.NICModel == was.NICModel {
			h.NICModel = ""
		}
		if h.SMBIOS.ProductName == prev.SMBIOS.ProductName && prev.SMBIOS.ProductName == was.SMBIOS.ProductName {
			h.SMBIOS.ProductName = ""
		}
	}
	DefaultMacClass(c)
}

// setDuration sets *d to def when unset.
func setDuration(d **metav1.Duration, def time.Duration) {
	if *d == nil {
		*d = &metav1.Duration{Duration: def}
	}
}

// DefaultMacPool fills a pool's namespace, idle and maxProvisioning. It
// leaves maxMachines unset: written into spec, a default would freeze the
// cap at create time (and refuse a later raise of idle); unset, the pool
// controller applies MacPoolSpec.EffectiveMaxMachines, which follows idle.
// It is idempotent.
func DefaultMacPool(p *macvirtv1alpha1.MacPool) {
	s := &p.Spec
	if s.Namespace == "" {
		s.Namespace = macvirtv1alpha1.DefaultPoolNamespace
	}
	if s.Idle == nil {
		v := macvirtv1alpha1.DefaultPoolIdle
		s.Idle = &v
	}
	if s.MaxProvisioning == 0 {
		s.MaxProvisioning = macvirtv1alpha1.DefaultMaxProvisioning
	}
	if s.IdleState == "" {
		s.IdleState = macvirtv1alpha1.IdleRunning
	}
}

// DefaultMacClaim fills a claim's reclaimPolicy. It is idempotent.
func DefaultMacClaim(c *macvirtv1alpha1.MacClaim) {
	if c.Spec.ReclaimPolicy == "" {
		c.Spec.ReclaimPolicy = macvirtv1alpha1.DefaultReclaimPolicy
	}
}

// IdentityFunc returns a fresh, unused SMBIOS identity for a product name.
type IdentityFunc func(productName string) (macvirtv1alpha1.MachineSMBIOS, error)

// DefaultMacMachine defaults spec.running and gives a machine without one
// its SMBIOS identity, drawn for the class's productName. An identity that
// is already set is never changed. It is idempotent.
func DefaultMacMachine(m *macvirtv1alpha1.MacMachine, productName string, newIdentity IdentityFunc) error {
	if m.Spec.Running == nil {
		t := true
		m.Spec.Running = &t
	}
	if m.Spec.SMBIOS != nil {
		return nil
	}
	if productName == "" {
		productName = macvirtv1alpha1.DefaultProductName
	}
	id, err := newIdentity(productName)
	if err != nil {
		return err
	}
	m.Spec.SMBIOS = &id
	return nil
}
