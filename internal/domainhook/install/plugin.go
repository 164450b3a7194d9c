// Package install is what the operator does to install its domain hook:
// it chooses the transport the cluster supports (Resolve) and the hook
// image for the cluster's KubeVirt (ChooseImage), and writes and keeps the
// transport's objects (Objects). It describes the macOS domain settings as
// a KubeVirt Plugin (plugin.kubevirt.io/v1alpha1, KubeVirt 1.9's Plugins feature gate):
// either as CEL domain hooks that virt-launcher evaluates itself, or as a
// domain hook served by macvirt's hook binary in a sidecar container that a
// MutatingAdmissionPolicy adds to macvirt's virt-launcher pods.
//
// The CEL reads each machine's values from the VMI annotations
// contract.PluginAnnotations writes, and writes the same domain as
// internal/domainhook/hook.Apply: the tests compare both on every golden
// variant with KubeVirt's own evaluator (hack/kubevirt/domainxml).
package install

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

const (
	// Name is the Plugin's name, and the directory of its socket.
	Name = "macvirt-macos"
	// SocketVolume is the emptyDir virt-controller adds to every
	// virt-launcher pod while the Plugins gate is on
	// (pkg/virt-controller/services/template.go, pluginSocketsVolumeName).
	SocketVolume = "kubevirt-plugin-sockets"
	// SocketDir is where the sidecar mounts its subdirectory of that volume;
	// virt-launcher accepts only sockets under /var/run/kubevirt-plugin/<plugin>/
	// (pkg/virt-launcher/virtwrap/plugins/sidecar.go, validateSocketPath).
	SocketDir = "/var/run/kubevirt-plugin/" + Name + "/"
	// SocketPath is the hook binary's MutateDomain socket.
	SocketPath = SocketDir + "hook.sock"
	// SidecarContainer is the container the admission policy adds.
	SidecarContainer = "macvirt-domain-hook"
	// SidecarTimeout bounds one MutateDomain call. Apply takes
	// milliseconds; the rest is the dial. A hook that does not answer in
	// 10 s is stuck, and failing the start says so sooner than KubeVirt's
	// 30 s default.
	SidecarTimeout = 10 * time.Second
)

// Options are the operator settings the Plugin carries.
type Options struct {
	// HookImage is the sidecar's image (plugin-sidecar only).
	HookImage string
	// EmulatorPath, when set, replaces the domain's <emulator>. It is the
	// operator's setting, never a VMI's.
	EmulatorPath string
}

// annotations is the CEL of a VMI's annotations.
const annotations = "vmi.ObjectMeta.Annotations"

func ann(key string) string { return annotations + "[" + strconv.Quote(key) + "]" }

func hasAnn(key string) string { return strconv.Quote(key) + " in " + annotations }

// quotedList is a CEL list literal of strings.
func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// qemuValueRE matches a QEMU option value whose commas are all doubled
// (contract.QEMUValue), so an annotation cannot add an option.
const qemuValueRE = `([^,]|,,)+`

// Patterns the CEL checks the annotation values against.
var (
	boardRE    = `^type=2,manufacturer=` + qemuValueRE + `,product=` + qemuValueRE + `,serial=` + qemuValueRE + `$`
	appleSMCRE = `^(` + contract.NoAppleSMC + `|isa-applesmc,osk=` + qemuValueRE + `)$`
	// anyRE is a one-line value that is not empty (libvirtxml escapes it).
	anyRE = `^.+$`
)

// oneOf is a pattern matching exactly one of values.
func oneOf(values ...string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = regexp.QuoteMeta(v)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// fail is a CEL string expression that fails the hook with message: CEL
// has no way to raise an error of its own, but reading a key a map lacks
// is one, and virt-launcher reports it ("no such key: macvirt: ...") and,
// with the Fail strategy, does not start the VM.
func fail(message string) string { return ann("macvirt: " + message) }

// valid is the annotation's value when it is present and matches pattern;
// otherwise the hook fails and says which annotation is wrong. A VMI that
// macvirt did not render, or one edited by hand, does not start.
func valid(key, pattern string) string {
	return "(" + hasAnn(key) + " && " + ann(key) + ".matches(" + strconv.Quote(pattern) + ") ? " + ann(key) + " : " +
		fail(key+" is missing or malformed") + ")"
}

// celCondition selects the VMIs macvirt rendered: every transport writes
// the hook configuration annotation, so a VMI that lacks any of the Plugin's
// own values fails instead of starting without them.
func celCondition() string {
	return "has(vmi.ObjectMeta.Annotations) && " + hasAnn(contract.Annotation)
}

// cpuArgs is a CEL map literal from cpu.model to the -cpu value.
func cpuArgs() string {
	var entries []string
	for _, m := range contract.CPUModels() {
		arg, _ := contract.CPUArg(m)
		entries = append(entries, strconv.Quote(m)+": "+strconv.Quote(arg))
	}
	return "{" + strings.Join(entries, ", ") + "}"
}

func arg(value string) string { return "DomainQEMUCommandlineArg{Value: " + value + "}" }

// qemuArgsHook appends -cpu, -smbios type=2 and, in AppleSMC mode,
// -device isa-applesmc to KubeVirt's QEMU arguments. virt-launcher hands
// the hooks a fresh domain on every start; the condition leaves a domain
// that already has a -cpu argument alone, so a second run adds nothing.
func qemuArgsHook() pluginv1alpha1.DomainHook {
	smc := contract.AnnotationAppleSMC
	expr := "Domain{QEMUCommandline: DomainQEMUCommandline{Args: " +
		"(has(domainSpec.QEMUCommandline) ? domainSpec.QEMUCommandline.Args : []) + [" +
		arg(`"-cpu"`) + ", " + arg(cpuArgs()+"["+valid(contract.AnnotationCPUModel, oneOf(contract.CPUModels()...))+"]") + ", " +
		arg(`"-smbios"`) + ", " + arg(valid(contract.AnnotationBoard, boardRE)) + "] + " +
		"(" + valid(smc, appleSMCRE) + " == " + strconv.Quote(contract.NoAppleSMC) + " ? [] : [" +
		arg(`"-device"`) + ", " + arg(valid(smc, appleSMCRE)) + "])}}"
	return pluginv1alpha1.DomainHook{
		Condition: `!(has(domainSpec.QEMUCommandline) && domainSpec.QEMUCommandline.Args.exists(a, a.Value == "-cpu"))`,
		CEL:       &pluginv1alpha1.CELDomainHook{Expression: expr},
	}
}

// interfaceFields are the fields of libvirt's <interface> the NIC hook
// keeps (every field of libvirtxml.DomainInterface but the model and
// KubeVirt's virtio driver options; a test checks the list is complete).
var interfaceFields = []string{
	"Managed", "TrustGuestRXFilters", "MAC", "Source", "Boot", "VLan", "VirtualPort", "IP", "Route", "PortForward",
	"Script", "DownScript", "BackendDomain", "Target", "Guest", "Backend", "FilterRef", "Tune", "Teaming", "Link",
	"MTU", "Bandwidth", "PortOptions", "Coalesce", "ROM", "ACPI", "Alias", "Address",
}

// directFields are the interface fields that are not pointers: a nil
// pointer read from the domain would come back from KubeVirt's evaluator as
// an empty element (<boot order="0"/>), so pointers are copied through keep.
var directFields = map[string]bool{"Managed": true, "TrustGuestRXFilters": true, "IP": true, "Route": true, "PortForward": true}

// keep is the CEL that copies an optional (pointer) field of obj.
func keep(obj, field string) string {
	return field + ": has(" + obj + "." + field + ") ? " + obj + "." + field + " : null"
}

// nicHook gives every interface the NIC model macOS has a driver for,
// keeping its MAC, PCI address and KubeVirt's wiring.
func nicHook() pluginv1alpha1.DomainHook {
	nic := valid(contract.AnnotationNICModel, oneOf("vmxnet3", "e1000-82545em", contract.KeepNICModel))
	var fields []string
	for _, f := range interfaceFields {
		if directFields[f] {
			fields = append(fields, f+": i."+f)
		} else {
			fields = append(fields, keep("i", f))
		}
	}
	fields = append(fields, "Model: DomainInterfaceModel{Type: "+nic+"}")
	expr := "Domain{Devices: DomainDeviceList{Interfaces: size(domainSpec.Devices.Interfaces) == 0 ? " +
		"[DomainInterface{Model: DomainInterfaceModel{Type: " + fail("the domain has no network interface to give the NIC model to") + "}}] : " +
		"domainSpec.Devices.Interfaces.map(i, " + nic + " == " + strconv.Quote(contract.KeepNICModel) + " || has(i.Model) && i.Model.Type == " + nic +
		" ? i : DomainInterface{" + strings.Join(fields, ", ") + "})}}"
	return pluginv1alpha1.DomainHook{CEL: &pluginv1alpha1.CELDomainHook{Expression: expr}}
}

// nonEmpty is the CEL test of an SMBIOS entry libvirt's schema accepts.
const nonEmpty = `(e.Value != "" || e.File != "")`

// smbiosHook writes the system identity into the domain's SMBIOS sysinfo
// and makes the guest read it, dropping the empty entries KubeVirt writes
// (libvirt's schema refuses them).
func smbiosHook() pluginv1alpha1.DomainHook {
	var owned []string
	for _, name := range contract.SystemEntryNames {
		value := valid(contract.AnnotationSystemPrefix+name, anyRE)
		if name == "family" {
			value = strconv.Quote(contract.SMBIOSFamily)
		}
		owned = append(owned, "DomainSysInfoEntry{Name: "+strconv.Quote(name)+", Value: "+value+"}")
	}
	ownedList := "[" + strings.Join(owned, ", ") + "]"
	section := func(field, typ string) string {
		return field + ": has(s.SMBIOS." + field + ") && s.SMBIOS." + field + ".Entry.exists(e, " + nonEmpty + ") ? " +
			typ + "{Entry: s.SMBIOS." + field + ".Entry.filter(e, " + nonEmpty + ")} : null"
	}
	smbios := "DomainSysInfoSMBIOS{" + strings.Join([]string{
		section("BIOS", "DomainSysInfoBIOS"),
		"System: DomainSysInfoSystem{Entry: (has(s.SMBIOS.System) ? s.SMBIOS.System.Entry.filter(e, " + nonEmpty +
			" && !(e.Name in " + quotedList(contract.SystemEntryNames) + ")) : []) + " + ownedList + "}",
		"BaseBoard: s.SMBIOS.BaseBoard.filter(b, b.Entry.exists(e, " + nonEmpty + ")).map(b, DomainSysInfoBaseBoard{Entry: b.Entry.filter(e, " + nonEmpty + ")})",
		section("Chassis", "DomainSysInfoChassis"),
		"Processor: s.SMBIOS.Processor", "Memory: s.SMBIOS.Memory", keep("s.SMBIOS", "OEMStrings"),
	}, ", ") + "}"
	expr := `Domain{OS: DomainOS{SMBios: DomainSMBios{Mode: "sysinfo"}}, SysInfo: domainSpec.SysInfo.exists(s, has(s.SMBIOS)) ? ` +
		"domainSpec.SysInfo.map(s, !has(s.SMBIOS) ? s : DomainSysInfo{" + keep("s", "FWCfg") + ", SMBIOS: " + smbios + "}) : " +
		"domainSpec.SysInfo + [DomainSysInfo{SMBIOS: DomainSysInfoSMBIOS{System: DomainSysInfoSystem{Entry: " + ownedList + "}}}]}"
	return pluginv1alpha1.DomainHook{CEL: &pluginv1alpha1.CELDomainHook{Expression: expr}}
}

// keyboardHook adds a USB keyboard (macOS has no PS/2 driver) on the USB
// controller KubeVirt created for the tablet, and fails without one.
func keyboardHook() pluginv1alpha1.DomainHook {
	return pluginv1alpha1.DomainHook{
		Condition: valid(contract.AnnotationUSBKeyboard, oneOf("true", "false")) + ` == "true" && ` +
			`!domainSpec.Devices.Inputs.exists(i, i.Type == "keyboard" && i.Bus == "usb")`,
		CEL: &pluginv1alpha1.CELDomainHook{
			Expression: `Domain{Devices: DomainDeviceList{Inputs: domainSpec.Devices.Inputs + ` +
				`[DomainInput{Type: domainSpec.Devices.Controllers.exists(c, c.Type == "usb" && c.Model != "none") ? "keyboard" : ` +
				fail("the domain has no USB controller for the keyboard; the VMI needs a USB input device (macvirt renders a USB tablet)") +
				`, Bus: "usb"}]}}`,
		},
	}
}

// videoHook sets the model of every video card, keeping its heads, video
// RAM and address.
func videoHook() pluginv1alpha1.DomainHook {
	v := valid(contract.AnnotationVideoModel, oneOf("vga", "vmvga"))
	expr := "Domain{Devices: DomainDeviceList{Videos: size(domainSpec.Devices.Videos) == 0 ? " +
		"[DomainVideo{Model: DomainVideoModel{Type: " + v + ", Heads: 1u}}] : " +
		"domainSpec.Devices.Videos.map(d, d.Model.Type == " + v + " ? d : DomainVideo{Model: DomainVideoModel{Type: " + v +
		", Heads: d.Model.Heads, VRam: d.Model.VRam}, " +
		strings.Join([]string{keep("d", "Driver"), keep("d", "ACPI"), keep("d", "Alias"), keep("d", "Address")}, ", ") + "})}}"
	return pluginv1alpha1.DomainHook{CEL: &pluginv1alpha1.CELDomainHook{Expression: expr}}
}

// emulatorHook points the domain at the operator's QEMU binary.
func emulatorHook(path string) pluginv1alpha1.DomainHook {
	return pluginv1alpha1.DomainHook{CEL: &pluginv1alpha1.CELDomainHook{
		Expression: "Domain{Devices: DomainDeviceList{Emulator: " + strconv.Quote(path) + "}}",
	}}
}

func newPlugin() *pluginv1alpha1.Plugin {
	return &pluginv1alpha1.Plugin{
		TypeMeta: metav1.TypeMeta{APIVersion: pluginv1alpha1.SchemeGroupVersion.String(), Kind: "Plugin"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: map[string]string{
			"app.kubernetes.io/name": "macvirt", "app.kubernetes.io/managed-by": "macvirt",
		}},
	}
}

// CELPlugin is the Plugin of the plugin-cel transport. Its hooks fail the
// VM's start when they cannot be applied: a Mac that boots without its SMC
// or identity is worse than one that does not start.
func CELPlugin(opts Options) *pluginv1alpha1.Plugin {
	p := newPlugin()
	p.Spec = pluginv1alpha1.PluginSpec{
		Condition:       celCondition(),
		FailureStrategy: pluginv1alpha1.FailureStrategyFail,
		DomainHooks:     []pluginv1alpha1.DomainHook{qemuArgsHook(), nicHook(), smbiosHook(), keyboardHook(), videoHook()},
	}
	if opts.EmulatorPath != "" {
		p.Spec.DomainHooks = append(p.Spec.DomainHooks, emulatorHook(opts.EmulatorPath))
	}
	return p
}

// SidecarPlugin is the Plugin of the plugin-sidecar transport: one domain
// hook, served by macvirt's hook binary on SocketPath.
func SidecarPlugin() *pluginv1alpha1.Plugin {
	p := newPlugin()
	p.Spec = pluginv1alpha1.PluginSpec{
		Condition:       "has(vmi.ObjectMeta.Annotations) && " + hasAnn(contract.Annotation),
		FailureStrategy: pluginv1alpha1.FailureStrategyFail,
		DomainHooks: []pluginv1alpha1.DomainHook{{
			Sidecar: &pluginv1alpha1.SidecarDomainHook{SocketPath: SocketPath},
			Timeout: &metav1.Duration{Duration: SidecarTimeout},
		}},
		MutatingAdmissionPolicies: []pluginv1alpha1.AdmissionReference{{Name: InjectionPolicyName}},
	}
	return p
}

// InjectionPolicyName names the MutatingAdmissionPolicy (and its binding)
// that adds the hook sidecar to macvirt's virt-launcher pods.
const InjectionPolicyName = "macvirt-domain-hook-sidecar"
