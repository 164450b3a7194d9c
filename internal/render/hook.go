package render

import (
	"encoding/json"
	"fmt"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// HookConfig is the domain-hook configuration of a machine: everything
// KubeVirt cannot express, taken from the class and the machine's identity.
func HookConfig(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine, opts Options) (*contract.Config, error) {
	hw := class.Spec.EffectiveHardware()
	if m.Spec.SMBIOS == nil {
		return nil, fmt.Errorf("machine %s/%s has no spec.smbios identity yet", m.Namespace, m.Name)
	}
	cfg := &contract.Config{
		Version: contract.Version,
		CPU:     contract.CPU{Model: string(hw.CPUModel)},
		NIC:     contract.NIC{Model: string(hw.NICModel)},
		SMC:     contract.SMC{Mode: string(hw.SMC.Mode)},
		SMBIOS: contract.SMBIOS{
			Manufacturer: contract.AppleManufacturer,
			Product:      hw.SMBIOS.ProductName,
			Serial:       m.Spec.SMBIOS.SerialNumber,
			BoardSerial:  m.Spec.SMBIOS.BoardSerial,
			UUID:         m.Spec.SMBIOS.UUID,
		},
		Display:     contract.Display{Model: string(hw.Display.Model)},
		USBKeyboard: true,
		Emulator:    opts.EmulatorPath,
	}
	if hw.SMC.Mode == macvirtv1alpha1.SMCModeAppleSMC {
		cfg.SMC.OSK = opts.OSK
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// hookSidecar is one entry of KubeVirt's hooks.kubevirt.io/hookSidecars
// annotation.
type hookSidecar struct {
	Args  []string `json:"args"`
	Image string   `json:"image"`
}

// HookAnnotations are the VMI template annotations that hand the domain
// settings to every transport: the JSON configuration the hook binary reads
// (sidecar and plugin-sidecar), the flat values the Plugin's CEL reads
// (plugin-cel), and, for KubeVirt's hook sidecar only, the sidecar itself.
// Writing both configurations keeps a VM's template the same whichever
// transport the operator runs with, so switching transports restarts no VM.
// The machine controller also keeps an existing VM's annotations right for
// the operator's transport with it.
func HookAnnotations(cfg *contract.Config, opts Options) (map[string]string, error) {
	encoded, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	out, err := cfg.PluginAnnotations()
	if err != nil {
		return nil, err
	}
	out[contract.Annotation] = encoded
	if opts.DomainHook != contract.TransportSidecar && opts.DomainHook != "" {
		return out, nil
	}
	if opts.HookImage == "" {
		return nil, fmt.Errorf("no domain-hook image configured: set the operator's --hook-image flag")
	}
	sidecars, err := json.Marshal([]hookSidecar{{
		Args:  []string{"--version", contract.HookAPIVersion},
		Image: opts.HookImage,
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", contract.SidecarsAnnotation, err)
	}
	out[contract.SidecarsAnnotation] = string(sidecars)
	return out, nil
}
