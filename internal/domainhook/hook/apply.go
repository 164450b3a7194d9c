// Package hook is the domain hook, as it ships in the hook image: it applies to a libvirt domain, as KubeVirt's virt-launcher
// defines it, the macOS settings KubeVirt cannot express: the CPU model with
// the vendor and flags macOS checks, the Apple SMC device in AppleSMC mode,
// the SMBIOS system and board identity, a NIC model macOS has a driver for,
// a USB keyboard, the video card, and optionally another QEMU binary.
//
// Apply is pure and idempotent, and independent of how the domain arrives:
// internal/domainhook/server calls it from KubeVirt's sidecar-shim
// (onDefineDomain) and from a KubeVirt Plugin's MutateDomain. The Plugin's
// CEL transport (internal/domainhook/install) writes the same domain; the tests
// prove it with KubeVirt's own evaluator. It owns only
// what it sets; everything else KubeVirt put in the domain is kept.
package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// Apply returns domainXML with cfg applied. Malformed XML, an invalid
// configuration or a domain the settings cannot be applied to (no network
// interface, no USB controller) is an error naming what is wrong; there is
// never a partial result.
func Apply(domainXML string, cfg *contract.Config) (string, error) {
	if cfg == nil {
		return "", errors.New("no domain-hook configuration")
	}
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	d := &libvirtxml.Domain{}
	if err := d.Unmarshal(domainXML); err != nil {
		return "", fmt.Errorf("parsing the domain XML: %w", err)
	}
	if d.Devices == nil {
		return "", errors.New("the domain has no <devices>")
	}
	for _, step := range []func(*libvirtxml.Domain, *contract.Config) error{
		applyCommandline, applyNIC, applySMBIOS, applyKeyboard, applyVideo,
	} {
		if err := step(d, cfg); err != nil {
			return "", err
		}
	}
	if cfg.Emulator != "" {
		d.Devices.Emulator = cfg.Emulator
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("writing the domain XML: %w", err)
	}
	return out + "\n", nil
}

// ConfigFromVMI reads the hook configuration from the VMI's annotation.
func ConfigFromVMI(vmiJSON []byte) (*contract.Config, error) {
	var vmi struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(vmiJSON, &vmi); err != nil {
		return nil, fmt.Errorf("parsing the VMI JSON: %w", err)
	}
	raw, ok := vmi.Metadata.Annotations[contract.Annotation]
	if !ok {
		return nil, fmt.Errorf("VMI %s/%s has no %s annotation: it was not rendered by macvirt, or the annotation was removed",
			vmi.Metadata.Namespace, vmi.Metadata.Name, contract.Annotation)
	}
	return contract.Parse(raw)
}

// ownedArg says whether a -flag value pair on the QEMU command line is one
// Apply writes, so applying again replaces it instead of adding a second.
func ownedArg(flag, value string) bool {
	switch flag {
	case "-cpu":
		return true
	case "-smbios":
		return strings.HasPrefix(value, "type=2")
	case "-device":
		return strings.HasPrefix(value, "isa-applesmc")
	}
	return false
}

// applyCommandline sets the -cpu, -smbios type=2 and (AppleSMC) -device
// isa-applesmc arguments, keeping every other argument and environment
// variable in the domain.
func applyCommandline(d *libvirtxml.Domain, cfg *contract.Config) error {
	cpu, err := contract.CPUArg(cfg.CPU.Model)
	if err != nil {
		return err
	}
	smc, err := cfg.AppleSMCArg()
	if err != nil {
		return err
	}
	if d.QEMUCommandline == nil {
		d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
	}
	var kept []libvirtxml.DomainQEMUCommandlineArg
	args := d.QEMUCommandline.Args
	for i := 0; i < len(args); i++ {
		if i+1 < len(args) && ownedArg(args[i].Value, args[i+1].Value) {
			i++
			continue
		}
		kept = append(kept, args[i])
	}
	add := func(flag, value string) {
		kept = append(kept, libvirtxml.DomainQEMUCommandlineArg{Value: flag}, libvirtxml.DomainQEMUCommandlineArg{Value: value})
	}
	add("-cpu", cpu)
	add("-smbios", cfg.BoardArg())
	if smc != "" {
		add("-device", smc)
	}
	d.QEMUCommandline.Args = kept
	return nil
}

// applyNIC rewrites every interface's model, keeping its MAC, PCI address,
// target and everything else KubeVirt wired. Options of KubeVirt's virtio
// driver do not apply to other models and are dropped with it.
func applyNIC(d *libvirtxml.Domain, cfg *contract.Config) error {
	model, err := contract.LibvirtNICModel(cfg.NIC.Model)
	if err != nil {
		return err
	}
	if len(d.Devices.Interfaces) == 0 {
		return errors.New("the domain has no network interface to give the NIC model to")
	}
	if model == "" {
		return nil
	}
	for i := range d.Devices.Interfaces {
		iface := &d.Devices.Interfaces[i]
		if iface.Model == nil || iface.Model.Type != model {
			iface.Driver = nil
		}
		iface.Model = &libvirtxml.DomainInterfaceModel{Type: model}
	}
	return nil
}

// applySMBIOS writes the system identity into the domain's SMBIOS sysinfo
// and makes the guest read it. libvirt refuses a sysinfo UUID that differs
// from the domain's, so a mismatch is an error, never a silent change.
func applySMBIOS(d *libvirtxml.Domain, cfg *contract.Config) error {
	if d.UUID != "" && !strings.EqualFold(d.UUID, cfg.SMBIOS.UUID) {
		return fmt.Errorf("smbios.uuid %s differs from the domain's UUID %s (the VMI's spec.domain.firmware.uuid); libvirt would refuse it",
			cfg.SMBIOS.UUID, d.UUID)
	}
	var smbios *libvirtxml.DomainSysInfoSMBIOS
	for i := range d.SysInfo {
		if d.SysInfo[i].SMBIOS != nil {
			smbios = d.SysInfo[i].SMBIOS
			break
		}
	}
	if smbios == nil {
		d.SysInfo = append(d.SysInfo, libvirtxml.DomainSysInfo{SMBIOS: &libvirtxml.DomainSysInfoSMBIOS{}})
		smbios = d.SysInfo[len(d.SysInfo)-1].SMBIOS
	}
	if smbios.System == nil {
		smbios.System = &libvirtxml.DomainSysInfoSystem{}
	}
	dropEmptySMBIOS(smbios)
	// The owned entries go after every other one, in a fixed order, so the
	// result does not depend on where KubeVirt put them (and the Plugin's
	// CEL, which can only filter and append, writes the same domain).
	var entries []libvirtxml.DomainSysInfoEntry
	for _, e := range smbios.System.Entry {
		if !slices.Contains(contract.SystemEntryNames, e.Name) {
			entries = append(entries, e)
		}
	}
	for _, e := range cfg.SystemEntries() {
		entries = append(entries, libvirtxml.DomainSysInfoEntry{Name: e.Name, Value: e.Value})
	}
	smbios.System.Entry = entries
	if d.OS == nil {
		d.OS = &libvirtxml.DomainOS{}
	}
	d.OS.SMBios = &libvirtxml.DomainSMBios{Mode: "sysinfo"}
	return nil
}

// dropEmptySMBIOS removes the entries without a value, and the sections left
// without entries, that KubeVirt writes: libvirt's schema refuses them, and
// they carry nothing.
func dropEmptySMBIOS(s *libvirtxml.DomainSysInfoSMBIOS) {
	nonEmpty := func(entries []libvirtxml.DomainSysInfoEntry) []libvirtxml.DomainSysInfoEntry {
		var out []libvirtxml.DomainSysInfoEntry
		for _, e := range entries {
			if e.Value != "" || e.File != "" {
				out = append(out, e)
			}
		}
		return out
	}
	if s.System != nil {
		s.System.Entry = nonEmpty(s.System.Entry)
	}
	if s.BIOS != nil {
		if s.BIOS.Entry = nonEmpty(s.BIOS.Entry); len(s.BIOS.Entry) == 0 {
			s.BIOS = nil
		}
	}
	if s.Chassis != nil {
		if s.Chassis.Entry = nonEmpty(s.Chassis.Entry); len(s.Chassis.Entry) == 0 {
			s.Chassis = nil
		}
	}
	var boards []libvirtxml.DomainSysInfoBaseBoard
	for _, b := range s.BaseBoard {
		if b.Entry = nonEmpty(b.Entry); len(b.Entry) > 0 {
			boards = append(boards, b)
		}
	}
	s.BaseBoard = boards
}

// applyKeyboard adds a USB keyboard (macOS has no PS/2 driver) on the USB
// controller KubeVirt created for the tablet.
func applyKeyboard(d *libvirtxml.Domain, cfg *contract.Config) error {
	if !cfg.USBKeyboard {
		return nil
	}
	for _, in := range d.Devices.Inputs {
		if in.Type == "keyboard" && in.Bus == "usb" {
			return nil
		}
	}
	usb := false
	for _, c := range d.Devices.Controllers {
		if c.Type == "usb" && c.Model != "none" {
			usb = true
		}
	}
	if !usb {
		return errors.New("the domain has no USB controller for the keyboard; the VMI needs a USB input device (macvirt renders a USB tablet)")
	}
	d.Devices.Inputs = append(d.Devices.Inputs, libvirtxml.DomainInput{Type: "keyboard", Bus: "usb"})
	return nil
}

// applyVideo sets the model of every video card (KubeVirt makes one),
// keeping its heads and video RAM and the card's other settings.
func applyVideo(d *libvirtxml.Domain, cfg *contract.Config) error {
	model, err := contract.LibvirtVideoModel(cfg.Display.Model)
	if err != nil {
		return err
	}
	if len(d.Devices.Videos) == 0 {
		d.Devices.Videos = []libvirtxml.DomainVideo{{Model: libvirtxml.DomainVideoModel{Type: model, Heads: 1}}}
		return nil
	}
	for i := range d.Devices.Videos {
		v := &d.Devices.Videos[i]
		if v.Model.Type != model {
			v.Model = libvirtxml.DomainVideoModel{Type: model, Heads: v.Model.Heads, VRam: v.Model.VRam}
		}
	}
	return nil
}
