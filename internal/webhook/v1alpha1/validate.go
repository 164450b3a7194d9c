package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/tenancy"
)

// maxPoolNameLength leaves room for the slot suffix of the pool's machine names.
const maxPoolNameLength = 52

// ValidateMacPool checks a pool. class is the pool's class, nil when it does
// not exist (yet): GitOps applies objects in any order, so that is a
// warning, not a denial.
func ValidateMacPool(p *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	var warns []string
	if len(p.Name) > maxPoolNameLength {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), p.Name, fmt.Sprintf(
			"must be at most %d characters: the pool's machines are named <pool>-<slot>", maxPoolNameLength)))
	}
	if p.Spec.ClassName == "" {
		errs = append(errs, field.Required(spec.Child("className"), "name the MacClass of the pool's machines"))
	} else if class == nil {
		warns = append(warns, fmt.Sprintf("MacClass %q does not exist yet: the pool creates no machine until it does", p.Spec.ClassName))
	}
	if p.Spec.Namespace != "" {
		errs = append(errs, dnsLabel(spec.Child("namespace"), p.Spec.Namespace)...)
	}
	if p.Spec.Idle != nil && *p.Spec.Idle < 0 {
		errs = append(errs, field.Invalid(spec.Child("idle"), *p.Spec.Idle, "must not be negative"))
	}
	if p.Spec.MaxMachines != nil && p.Spec.Idle != nil && *p.Spec.MaxMachines < *p.Spec.Idle {
		errs = append(errs, field.Invalid(spec.Child("maxMachines"), *p.Spec.MaxMachines,
			fmt.Sprintf("must be at least spec.idle (%d): raise maxMachines or lower idle", *p.Spec.Idle)))
	}
	if p.Spec.MaxProvisioning < 0 {
		errs = append(errs, field.Invalid(spec.Child("maxProvisioning"), p.Spec.MaxProvisioning, "must be at least 1"))
	}
	if p.Spec.IdleState == macvirtv1alpha1.IdleSuspended && class != nil && !class.Spec.OnHosts() {
		warns = append(warns, fmt.Sprintf("idleState Suspended: MacClass %s runs on KubeVirt, which cannot save a VM's memory; its idle machines "+
			"keep running, each holding its node's macOS slot (condition IdleSuspended says so)", class.Name))
	}
	if class != nil && class.Spec.Tenancy.OnDemand != nil && !*class.Spec.Tenancy.OnDemand && p.Spec.Idle != nil && *p.Spec.Idle == 0 {
		warns = append(warns, fmt.Sprintf("idle is 0 and MacClass %s has onDemand false: claims of this pool wait until idle is raised", class.Name))
	}
	return errs, warns
}

// ValidateMacPoolUpdate checks a pool change: its class and namespace are fixed.
func ValidateMacPoolUpdate(old, p *macvirtv1alpha1.MacPool, class *macvirtv1alpha1.MacClass) (field.ErrorList, []string) {
	errs, warns := ValidateMacPool(p, class)
	spec := field.NewPath("spec")
	if old.Spec.ClassName != p.Spec.ClassName {
		errs = append(errs, field.Invalid(spec.Child("className"), p.Spec.ClassName,
			fmt.Sprintf("is immutable (was %q): create a new pool for another class", old.Spec.ClassName)))
	}
	if old.Spec.Namespace != p.Spec.Namespace && old.Spec.Namespace != "" {
		errs = append(errs, field.Invalid(spec.Child("namespace"), p.Spec.Namespace,
			fmt.Sprintf("is immutable (was %q): create a new pool for another namespace", old.Spec.Namespace)))
	}
	return errs, warns
}

// ClaimEnv is what claim validation looked up. Nil fields do not exist.
type ClaimEnv struct {
	// Pool is the claim's spec.poolName.
	Pool *macvirtv1alpha1.MacPool
	// Class is the claim's class: spec.className, or the pool's class.
	Class *macvirtv1alpha1.MacClass
	// Namespace is the claim's namespace (for the class's tenancy).
	Namespace *corev1.Namespace
}

// ValidateMacClaim checks a new claim: it names a class or a pool that
// agree, its namespace may claim the class, and its SSH keys parse. A class
// or pool that does not exist yet is a warning.
func ValidateMacClaim(c *macvirtv1alpha1.MacClaim, env ClaimEnv) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	var warns []string
	switch {
	case c.Spec.ClassName == "" && c.Spec.PoolName == "":
		errs = append(errs, field.Required(spec.Child("className"), "set spec.className, spec.poolName, or both"))
	case c.Spec.PoolName != "" && env.Pool == nil:
		warns = append(warns, fmt.Sprintf("MacPool %q does not exist yet: the claim stays Pending until it does", c.Spec.PoolName))
	case c.Spec.PoolName != "" && !tenancy.PoolServes(env.Pool, c):
		kind, ns, name := tenancy.PoolKeptFor(env.Pool)
		errs = append(errs, field.Forbidden(spec.Child("poolName"), fmt.Sprintf(
			"MacPool %s keeps warm Macs for %s %s/%s, and only its runners take them; name another pool, or only a className",
			env.Pool.Name, kind, ns, name)))
	case c.Spec.PoolName != "" && c.Spec.ClassName != "" && env.Pool.Spec.ClassName != c.Spec.ClassName:
		errs = append(errs, field.Invalid(spec.Child("className"), c.Spec.ClassName, fmt.Sprintf(
			"MacPool %s holds machines of MacClass %q: set className to %q or drop it", env.Pool.Name, env.Pool.Spec.ClassName, env.Pool.Spec.ClassName)))
	}
	className := c.Spec.ClassName
	if className == "" && env.Pool != nil {
		className = env.Pool.Spec.ClassName
	}
	if className != "" && env.Class == nil {
		warns = append(warns, fmt.Sprintf("MacClass %q does not exist yet: the claim stays Pending until it does", className))
	}
	if env.Class != nil && env.Namespace != nil {
		if err := tenancyError(c, env.Class, env.Namespace); err != nil {
			errs = append(errs, err)
		}
	}
	if env.Class != nil {
		if _, r := tenancy.Access(env.Class, c.Spec.Access.Type); r != nil {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "access", "type"), r.Message))
		}
		if limit := env.Class.Spec.Tenancy.MaxClaimLifetime; limit != nil && c.Spec.Lifetime != nil && c.Spec.Lifetime.Duration > limit.Duration {
			warns = append(warns, fmt.Sprintf("spec.lifetime %s is more than MacClass %s's tenancy.maxClaimLifetime: the claim keeps its machine %s",
				c.Spec.Lifetime.Duration, env.Class.Name, limit.Duration))
		}
	}
	errs = append(errs, validateSSHKeys(spec.Child("sshAuthorizedKeys"), c.Spec.SSHAuthorizedKeys, &warns)...)
	errs = append(errs, validateClaimBootstrap(c, env.Class)...)
	return errs, warns
}

// tenancyError refuses a claim the class does not admit (internal/tenancy,
// which the claim controller applies too). A class whose selector does not
// parse is not the claim's fault: the claim is admitted and waits, its
// status naming the class's problem.
func tenancyError(c *macvirtv1alpha1.MacClaim, class *macvirtv1alpha1.MacClass, ns *corev1.Namespace) *field.Error {
	policy := c.Spec.ReclaimPolicy
	if policy == "" {
		policy = macvirtv1alpha1.ReclaimDelete
	}
	r := tenancy.Check(class, c.Namespace, ns.Labels, policy)
	if r == nil || r.Reason == macvirtv1alpha1.ReasonInvalidClass {
		return nil
	}
	path := field.NewPath("metadata", "namespace")
	if r.Field == "spec.reclaimPolicy" {
		path = field.NewPath("spec", "reclaimPolicy")
	}
	return field.Forbidden(path, r.Message)
}

// maxSSHKeys and maxSSHKeyLength are the CRD's limits.
const (
	maxSSHKeys      = 64
	maxSSHKeyLength = 16384
)

// validateSSHKeys accepts one OpenSSH authorized_keys line per entry.
func validateSSHKeys(p *field.Path, keys []string, warns *[]string) field.ErrorList {
	var errs field.ErrorList
	if len(keys) > maxSSHKeys {
		errs = append(errs, field.TooMany(p, len(keys), maxSSHKeys))
	}
	seen := map[string]int{}
	for i, k := range keys {
		ip := p.Index(i)
		switch {
		case len(k) > maxSSHKeyLength:
			errs = append(errs, field.TooLong(ip, "", maxSSHKeyLength))
			continue
		case strings.ContainsAny(strings.TrimRight(k, "\n"), "\r\n"):
			errs = append(errs, field.Invalid(ip, truncateValue(k), "must be a single authorized_keys line; put each key in its own entry"))
			continue
		}
		pub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(k))
		if err != nil || len(strings.TrimSpace(string(rest))) > 0 {
			errs = append(errs, field.Invalid(ip, truncateValue(k),
				"not an SSH public key in authorized_keys format (for example \"ssh-ed25519 AAAA... user@host\")"))
			continue
		}
		fp := ssh.FingerprintSHA256(pub)
		if j, dup := seen[fp]; dup {
			*warns = append(*warns, fmt.Sprintf("%s is the same key as %s", ip, p.Index(j)))
		}
		seen[fp] = i
	}
	return errs
}

func truncateValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ValidateMacClaimUpdate checks a claim change: className and poolName are
// fixed, and the reclaim policy is fixed once bound (the machine recorded
// the policy it was bound with).
func ValidateMacClaimUpdate(old, c *macvirtv1alpha1.MacClaim) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if old.Spec.ClassName != c.Spec.ClassName {
		errs = append(errs, field.Invalid(spec.Child("className"), c.Spec.ClassName,
			fmt.Sprintf("is immutable (was %q): delete the claim and create another", old.Spec.ClassName)))
	}
	if old.Spec.PoolName != c.Spec.PoolName {
		errs = append(errs, field.Invalid(spec.Child("poolName"), c.Spec.PoolName,
			fmt.Sprintf("is immutable (was %q): delete the claim and create another", old.Spec.PoolName)))
	}
	if old.Status.MachineRef != nil && reclaimOf(old) != reclaimOf(c) {
		errs = append(errs, field.Invalid(spec.Child("reclaimPolicy"), c.Spec.ReclaimPolicy, fmt.Sprintf(
			"cannot change once the claim is bound: MacMachine %s was bound with %s", old.Status.MachineRef.Name, reclaimOf(old))))
	}
	if !equality.Semantic.DeepEqual(old.Spec.Bootstrap, c.Spec.Bootstrap) {
		errs = append(errs, field.Forbidden(spec.Child("bootstrap"),
			"is immutable: what a Mac runs is fixed when the claim is made; delete the claim and create another"))
	}
	var warns []string
	return append(errs, validateSSHKeys(spec.Child("sshAuthorizedKeys"), c.Spec.SSHAuthorizedKeys, &warns)...)
}

func reclaimOf(c *macvirtv1alpha1.MacClaim) macvirtv1alpha1.ReclaimPolicy {
	if c.Spec.ReclaimPolicy == "" {
		return macvirtv1alpha1.DefaultReclaimPolicy
	}
	return c.Spec.ReclaimPolicy
}

// MachineEnv is what machine validation looked up.
type MachineEnv struct {
	// Class is the machine's class; nil when it does not exist (yet).
	Class *macvirtv1alpha1.MacClass
	// SMBIOSUsers maps each identity value of the machine (serial, board
	// serial, UUID) already used by another machine to that machine's
	// namespace/name.
	SMBIOSUsers map[string]string
	// ByOperator is true when the operator itself creates the machine (for
	// a pool or a claim, which were checked); anyone else's machine obeys
	// its class's tenancy as a claim from its namespace would.
	ByOperator bool
	// Namespace is the machine's namespace; nil when it was not read.
	Namespace *corev1.Namespace
}

// maxMachineNameLength keeps a machine's name usable as a label value.
const maxMachineNameLength = 63

// ValidateMacMachine checks a new machine: a unique, well-formed SMBIOS
// identity, and a class that exists (a warning otherwise).
func ValidateMacMachine(m *macvirtv1alpha1.MacMachine, env MachineEnv) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	var warns []string
	if len(m.Name) > maxMachineNameLength {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), m.Name, fmt.Sprintf(
			"must be at most %d characters: the name is carried in label values", maxMachineNameLength)))
	}
	if m.Spec.ClassName == "" {
		errs = append(errs, field.Required(spec.Child("className"), "name the MacClass to render the machine from"))
	} else if env.Class == nil {
		warns = append(warns, fmt.Sprintf("MacClass %q does not exist yet: the machine stays Pending until it does", m.Spec.ClassName))
	}
	if env.Class != nil && env.Namespace != nil && !env.ByOperator {
		if r := tenancy.Check(env.Class, m.Namespace, env.Namespace.Labels, macvirtv1alpha1.ReclaimDelete); r != nil && r.Reason != macvirtv1alpha1.ReasonInvalidClass {
			errs = append(errs, field.Forbidden(field.NewPath("metadata", "namespace"),
				r.Message+" (a machine made by hand obeys its class's tenancy as a claim does)"))
		}
	}
	if id := m.Spec.SMBIOS; id != nil {
		sp := spec.Child("smbios")
		for _, f := range []struct {
			name, value string
			valid       func(string) bool
			format      string
		}{
			{"serialNumber", id.SerialNumber, isUpperAlnum(12), "12 upper-case letters and digits"},
			{"boardSerial", id.BoardSerial, isUpperAlnum(17), "17 upper-case letters and digits"},
			{"uuid", id.UUID, isUUID, "a UUID such as 0B5A3C2E-8F7D-4E1A-9C3B-2D4E6F8A0B1C"},
		} {
			switch {
			case f.value == "":
				errs = append(errs, field.Required(sp.Child(f.name), "set the whole identity, or drop spec.smbios to have one generated"))
			case !f.valid(f.value):
				errs = append(errs, field.Invalid(sp.Child(f.name), f.value, "must be "+f.format))
			case env.SMBIOSUsers[f.value] != "":
				errs = append(errs, &field.Error{Type: field.ErrorTypeDuplicate, Field: sp.Child(f.name).String(), BadValue: f.value,
					Detail: fmt.Sprintf("already used by MacMachine %s; identities must be unique: drop spec.smbios "+
						"to have a unique one generated", env.SMBIOSUsers[f.value])})
			}
		}
	}
	return errs, warns
}

func isUpperAlnum(n int) func(string) bool {
	return func(s string) bool {
		if len(s) != n {
			return false
		}
		for _, r := range s {
			if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
				return false
			}
		}
		return true
	}
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
	}
	return true
}
