// Package hookconfigtest holds the domain-hook configuration the tests of
// several packages share: the one of the rendered default class, whose UUID
// is that of every KubeVirt domain fixture (internal/domainhook/testdata).
package hookconfigtest

import "github.com/macvirt/macvirt/internal/hookconfig"

// Config returns a fresh copy of the default class's configuration.
func Config() *hookconfig.Config {
	return &hookconfig.Config{
		Version: hookconfig.Version,
		CPU:     hookconfig.CPU{Model: "Haswell-noTSX"},
		NIC:     hookconfig.NIC{Model: "vmxnet3"},
		SMC:     hookconfig.SMC{Mode: "VirtualSMC"},
		SMBIOS: hookconfig.SMBIOS{Manufacturer: hookconfig.AppleManufacturer, Product: "iMacPro1,1", Serial: "C02XK1ZJHX87",
			BoardSerial: "C02123ABCDEHX87FG", UUID: "5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60"},
		Display:     hookconfig.Display{Model: "vga"},
		USBKeyboard: true,
	}
}
