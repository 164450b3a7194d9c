package render

import (
	"encoding/json"
	"fmt"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/hookconfig"
)

// HookConfig is the domain-hook configuration of a machine: everything
// KubeVirt cannot express, taken from the class and the machine's identity.
func HookConfig(class *macvirtv1alpha1.MacClass, m *macvirtv1alpha1.MacMachine, opts Options) (*hookconfig.Config, error) {
	hw := class.Spec.EffectiveHardware()
	if m.Spec.SMBIOS == nil {
		return nil, fmt.Errorf("machine %s/%s has no spec.smbios identity yet", m.Namespace, m.Name)
	}
	cfg := &hookconfig.Config{
		Version: hookconfig.Version,
		CPU:     hookconfig.CPU{Model: string(hw.CPUModel)},
		NIC:     hookconfig.NIC{Model: string(hw.NICModel)},
		SMC:     hookconfig.SMC{Mode: string(hw.SMC.Mode)},
		SMBIOS: hookconfig.SMBIOS{
			Manufacturer: hookconfig.AppleManufacturer,
			Product:      hw.SMBIOS.ProductName,
			Serial:       m.Spec.SMBIOS.SerialNumber,
			BoardSerial:  m.Spec.SMBIOS.BoardSerial,
			UUID:         m.Spec.SMBIOS.UUID,
		},
		Display:     hookconfig.Display{Model: string(hw.Display.Model)},
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

// hookAnnotations are the VMI template annotations that run the domain hook
// and hand it its configuration.
func hookAnnotations(cfg *hookconfig.Config, opts Options) (map[string]string, error) {
	if opts.HookImage == "" {
		return nil, fmt.Errorf("no domain-hook image configured: set the operator's --hook-image flag")
	}
	sidecars, err := json.Marshal([]hookSidecar{{
		Args:  []string{"--version", hookconfig.HookAPIVersion},
		Image: opts.HookImage,
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", hookconfig.SidecarsAnnotation, err)
	}
	encoded, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	return map[string]string{
		hookconfig.SidecarsAnnotation: string(sidecars),
		hookconfig.Annotation:         encoded,
	}, nil
}
