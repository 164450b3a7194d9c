// Package contract is the one contract between the operator and its domain
// hook: the versioned configuration the operator renders into a VM
// template's annotations and the hook reads back, the flat annotations the
// Plugin's CEL reads, the settings both sides turn it into, and the
// transports that carry it. The operator (internal/render, the machine
// controller, internal/domainhook/install) and the hook image
// (internal/domainhook/hook and server) both import it, and it imports no
// API type, so the hook image stays free of them.
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

const (
	// Annotation is the VMI annotation that carries the JSON Config.
	Annotation = "macvirt.io/domain-hook"

	// Version is the only configuration version this build understands. A
	// hook that reads another version refuses it rather than guessing.
	Version = "v1"

	// SidecarsAnnotation is KubeVirt's annotation listing hook sidecars.
	SidecarsAnnotation = "hooks.kubevirt.io/hookSidecars"

	// HookAPIVersion is the KubeVirt hook API the sidecar speaks.
	HookAPIVersion = "v1alpha3"

	// AppleManufacturer is the SMBIOS manufacturer macOS expects.
	AppleManufacturer = "Apple Inc."
)

// Config is everything the hook applies to the libvirt domain that KubeVirt
// cannot express itself.
type Config struct {
	// Version is the configuration version; it must equal Version.
	Version string `json:"version"`
	// CPU is the QEMU CPU model and flags.
	CPU CPU `json:"cpu"`
	// NIC is the network card model to rewrite KubeVirt's interface to.
	NIC NIC `json:"nic"`
	// SMC selects VirtualSMC (nothing injected) or AppleSMC (isa-applesmc).
	SMC SMC `json:"smc"`
	// SMBIOS is the system and board identity.
	SMBIOS SMBIOS `json:"smbios"`
	// Display is the video card model.
	Display Display `json:"display"`
	// USBKeyboard adds a USB keyboard to the domain's USB controller.
	USBKeyboard bool `json:"usbKeyboard"`
	// Emulator, when set, replaces the domain's <emulator> path, for nodes
	// whose default QEMU lacks a device macOS needs.
	Emulator string `json:"emulator,omitempty"`
}

// CPU is the CPU the guest sees.
type CPU struct {
	// Model is the QEMU CPU model (e.g. Haswell-noTSX, host-passthrough).
	Model string `json:"model"`
}

// NIC is the network card the guest sees.
type NIC struct {
	// Model is vmxnet3, e1000-82545em or virtio.
	Model string `json:"model"`
}

// SMC is the Apple System Management Controller setting.
type SMC struct {
	// Mode is VirtualSMC or AppleSMC.
	Mode string `json:"mode"`
	// OSK is the OSK string for isa-applesmc; only in AppleSMC mode.
	OSK string `json:"osk,omitempty"`
}

// SMBIOS is the machine identity.
type SMBIOS struct {
	// Manufacturer is the system manufacturer (Apple Inc.).
	Manufacturer string `json:"manufacturer"`
	// Product is the Mac model (e.g. iMacPro1,1).
	Product string `json:"product"`
	// Serial is the system serial number.
	Serial string `json:"serial"`
	// BoardSerial is the main logic board serial (SMBIOS type 2).
	BoardSerial string `json:"boardSerial"`
	// UUID is the system UUID.
	UUID string `json:"uuid"`
}

// Display is the emulated video card.
type Display struct {
	// Model is vga or vmware-svga.
	Model string `json:"model"`
}

// Marshal encodes the configuration for the annotation.
func (c *Config) Marshal() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding domain-hook config: %w", err)
	}
	return string(b), nil
}

// Parse decodes an annotation value strictly: unknown fields, trailing data
// and an unknown version are errors, never a partial result.
func Parse(s string) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	c := &Config{}
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("decoding %s annotation: %w", Annotation, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decoding %s annotation: trailing data after the JSON object", Annotation)
	}
	if c.Version != Version {
		return nil, fmt.Errorf("%s annotation has version %q; this hook understands %q", Annotation, c.Version, Version)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate reports every missing required value.
func (c *Config) Validate() error {
	var errs []error
	need := func(field, value string) {
		if value == "" {
			errs = append(errs, fmt.Errorf("%s annotation: %s is required", Annotation, field))
		}
	}
	need("cpu.model", c.CPU.Model)
	need("nic.model", c.NIC.Model)
	need("smc.mode", c.SMC.Mode)
	need("smbios.manufacturer", c.SMBIOS.Manufacturer)
	need("smbios.product", c.SMBIOS.Product)
	need("smbios.serial", c.SMBIOS.Serial)
	need("smbios.boardSerial", c.SMBIOS.BoardSerial)
	need("smbios.uuid", c.SMBIOS.UUID)
	need("display.model", c.Display.Model)
	if c.SMC.Mode == "AppleSMC" {
		need("smc.osk (AppleSMC mode)", c.SMC.OSK)
	}
	return errors.Join(errs...)
}
