// Package contracttest holds the domain-hook configuration the tests of
// several packages share: the one of the rendered default class, whose UUID
// is that of every KubeVirt domain fixture (internal/domainhook/hook/testdata).
package contracttest

import "github.com/macvirt/macvirt/internal/domainhook/contract"

// Config returns a fresh copy of the default class's configuration.
func Config() *contract.Config {
	return &contract.Config{
		Version: contract.Version,
		CPU:     contract.CPU{Model: "Haswell-noTSX"},
		NIC:     contract.NIC{Model: "vmxnet3"},
		SMC:     contract.SMC{Mode: "VirtualSMC"},
		SMBIOS: contract.SMBIOS{Manufacturer: contract.AppleManufacturer, Product: "iMacPro1,1", Serial: "C02XK1ZJHX87",
			BoardSerial: "C02123ABCDEHX87FG", UUID: "5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60"},
		Display:     contract.Display{Model: "vga"},
		USBKeyboard: true,
	}
}
