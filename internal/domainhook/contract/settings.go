package contract

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file turns a Config into the values that reach libvirt and QEMU:
// the -cpu, -smbios type=2 and -device isa-applesmc arguments, the libvirt
// NIC and video models, and the SMBIOS system entries. Every transport of
// the domain settings uses them: internal/hook.Apply (the sidecar
// transports) and the CEL of the KubeVirt Plugin (internal/domainhook/install),
// which reads them from the VMI annotations PluginAnnotations returns.

// cpuFlags are the -cpu properties each supported model needs. Every model
// reports an Intel vendor (macOS refuses others) and an invariant TSC whose
// frequency it can read through the VMware CPUID leaf; the named models add
// the instruction sets macOS's kernel and frameworks use. "check" makes
// QEMU warn, not fail, when the host lacks one.
var cpuFlags = map[string]struct {
	qemuModel string
	flags     []string
}{
	"Haswell-noTSX": {"Haswell-noTSX", []string{"+pcid", "+ssse3", "+sse4.2", "+popcnt", "+avx", "+avx2", "+aes", "+fma",
		"+bmi1", "+bmi2", "+xsave", "+xsaveopt", "check"}},
	"Skylake-Client-noTSX-IBRS": {"Skylake-Client-noTSX-IBRS", []string{"+pcid", "+ssse3", "+sse4.2", "+popcnt", "+avx",
		"+avx2", "+aes", "+fma", "+bmi1", "+bmi2", "+xsave", "+xsaveopt", "check"}},
	"Penryn":           {"Penryn", []string{"+ssse3", "+sse4.2", "+popcnt", "+avx", "+aes", "+xsave", "+xsaveopt", "check"}},
	"host-passthrough": {"host", nil},
}

// baseCPUFlags come first for every model.
var baseCPUFlags = []string{"vendor=GenuineIntel", "+invtsc", "vmware-cpuid-freq=on"}

// nicModels maps a configured NIC model to libvirt's interface model; ""
// leaves the interface as KubeVirt made it.
var nicModels = map[string]string{"vmxnet3": "vmxnet3", "e1000-82545em": "e1000-82545em", "virtio": ""}

// videoModels maps a configured display to libvirt's video model.
var videoModels = map[string]string{"vga": "vga", "vmware-svga": "vmvga"}

// SMBIOSFamily is the system family every Mac reports.
const SMBIOSFamily = "Mac"

// CPUModels are the supported cpu.model values, sorted.
func CPUModels() []string {
	out := make([]string, 0, len(cpuFlags))
	for m := range cpuFlags {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// CPUArg is the -cpu value of a supported cpu.model.
func CPUArg(model string) (string, error) {
	m, ok := cpuFlags[model]
	if !ok {
		return "", fmt.Errorf("cpu.model %q is not supported; use one of %s", model, strings.Join(CPUModels(), ", "))
	}
	args := append([]string{m.qemuModel}, baseCPUFlags...)
	return strings.Join(append(args, m.flags...), ","), nil
}

// LibvirtNICModel is libvirt's interface model for a nic.model, "" for
// virtio (KubeVirt's own model is kept).
func LibvirtNICModel(model string) (string, error) {
	m, ok := nicModels[model]
	if !ok {
		return "", fmt.Errorf("nic.model %q is not supported; use vmxnet3, e1000-82545em or virtio", model)
	}
	return m, nil
}

// LibvirtVideoModel is libvirt's video model for a display.model.
func LibvirtVideoModel(model string) (string, error) {
	m, ok := videoModels[model]
	if !ok {
		return "", fmt.Errorf("display.model %q is not supported; use vga or vmware-svga", model)
	}
	return m, nil
}

// QEMUValue escapes a QEMU option value: a comma is written twice, so a
// value can never add an option of its own.
func QEMUValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// BoardArg is the -smbios value of the logic board (SMBIOS type 2).
func (c *Config) BoardArg() string {
	return fmt.Sprintf("type=2,manufacturer=%s,product=%s,serial=%s",
		QEMUValue(c.SMBIOS.Manufacturer), QEMUValue(c.SMBIOS.Product), QEMUValue(c.SMBIOS.BoardSerial))
}

// AppleSMCArg is the -device value of the emulated SMC in AppleSMC mode,
// "" in VirtualSMC mode.
func (c *Config) AppleSMCArg() (string, error) {
	switch c.SMC.Mode {
	case "AppleSMC":
		return "isa-applesmc,osk=" + QEMUValue(c.SMC.OSK), nil
	case "VirtualSMC":
		return "", nil
	}
	return "", fmt.Errorf("smc.mode %q is not supported; use VirtualSMC or AppleSMC", c.SMC.Mode)
}

// SystemEntry is one SMBIOS system (type 1) entry.
type SystemEntry struct{ Name, Value string }

// SystemEntryNames are the SMBIOS system entries the settings own, in the
// order they are written after every other entry.
var SystemEntryNames = []string{"manufacturer", "product", "serial", "uuid", "family"}

// SystemEntries are the SMBIOS system entries, in SystemEntryNames' order.
func (c *Config) SystemEntries() []SystemEntry {
	return []SystemEntry{
		{"manufacturer", c.SMBIOS.Manufacturer},
		{"product", c.SMBIOS.Product},
		{"serial", c.SMBIOS.Serial},
		{"uuid", c.SMBIOS.UUID},
		{"family", SMBIOSFamily},
	}
}

// The VMI annotations the KubeVirt Plugin's CEL reads (PluginAnnotations).
// CEL in virt-launcher has no JSON decoding and no string functions beyond
// concatenation and regular expressions, so each value is its own
// annotation, already in the form it takes in the domain.
const (
	PluginAnnotationPrefix = "domain.macvirt.io/"
	// AnnotationCPUModel is cpu.model; the Plugin maps it to the -cpu value.
	AnnotationCPUModel = PluginAnnotationPrefix + "cpu-model"
	// AnnotationBoard is the -smbios type=2 value (BoardArg).
	AnnotationBoard = PluginAnnotationPrefix + "smbios-board"
	// AnnotationAppleSMC is the -device isa-applesmc value, or NoAppleSMC.
	AnnotationAppleSMC = PluginAnnotationPrefix + "applesmc"
	// AnnotationNICModel is libvirt's interface model, or "virtio" (KubeVirt's
	// interface is kept).
	AnnotationNICModel = PluginAnnotationPrefix + "nic-model"
	// AnnotationVideoModel is libvirt's video model.
	AnnotationVideoModel = PluginAnnotationPrefix + "video-model"
	// AnnotationUSBKeyboard is "true" when a USB keyboard is added, "false"
	// otherwise.
	AnnotationUSBKeyboard = PluginAnnotationPrefix + "usb-keyboard"
	// NoAppleSMC is AnnotationAppleSMC in VirtualSMC mode. Every value is
	// written, optional ones too, so a removed annotation fails the start
	// instead of looking like a setting that is off.
	NoAppleSMC = "none"
	// KeepNICModel is AnnotationNICModel for virtio.
	KeepNICModel = "virtio"
	// AnnotationSystemPrefix + an entry name is an SMBIOS system entry.
	AnnotationSystemPrefix = PluginAnnotationPrefix + "smbios-"
)

// PluginAnnotations are the per-machine values of the Plugin transport.
// The emulator override is not among them: it is the operator's setting,
// written into the Plugin itself, so a VMI cannot choose the binary that
// virt-launcher runs.
func (c *Config) PluginAnnotations() (map[string]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if _, err := CPUArg(c.CPU.Model); err != nil {
		return nil, err
	}
	nic, err := LibvirtNICModel(c.NIC.Model)
	if err != nil {
		return nil, err
	}
	video, err := LibvirtVideoModel(c.Display.Model)
	if err != nil {
		return nil, err
	}
	smc, err := c.AppleSMCArg()
	if err != nil {
		return nil, err
	}
	if smc == "" {
		smc = NoAppleSMC
	}
	if nic == "" {
		nic = KeepNICModel
	}
	out := map[string]string{
		AnnotationCPUModel:    c.CPU.Model,
		AnnotationBoard:       c.BoardArg(),
		AnnotationVideoModel:  video,
		AnnotationAppleSMC:    smc,
		AnnotationNICModel:    nic,
		AnnotationUSBKeyboard: strconv.FormatBool(c.USBKeyboard),
	}
	for _, e := range c.SystemEntries() {
		if e.Name != "family" {
			out[AnnotationSystemPrefix+e.Name] = e.Value
		}
	}
	return out, nil
}

// IsDomainHookAnnotation says whether a VM template annotation carries the
// domain settings for one of the transports: the configuration itself, the
// hook sidecar's, or one of the Plugin's.
func IsDomainHookAnnotation(key string) bool {
	return key == Annotation || key == SidecarsAnnotation || strings.HasPrefix(key, PluginAnnotationPrefix)
}
