package hook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// smallDomain is a hand-written domain with what Apply needs and a few
// things it does not own (foreign QEMU arguments and environment, metadata).
const smallDomain = `<domain type="kvm" xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0">
  <name>ns_m</name>
  <uuid>5b3e8f7a-2c41-4d9e-8f0a-1b2c3d4e5f60</uuid>
  <metadata><kubevirt xmlns="http://kubevirt.io"><uid>abc</uid></kubevirt></metadata>
  <memory unit="b">8589934592</memory>
  <os><type arch="x86_64" machine="q35">hvm</type></os>
  <devices>
    <emulator>/usr/libexec/qemu-kvm</emulator>
    <controller type="usb" index="0" model="qemu-xhci"></controller>
    <interface type="ethernet">
      <mac address="02:00:00:aa:bb:cc"></mac>
      <target dev="tap0" managed="no"></target>
      <model type="virtio-non-transitional"></model>
      <driver name="vhost" queues="2"></driver>
      <address type="pci" domain="0x0000" bus="0x01" slot="0x00" function="0x0"></address>
    </interface>
    <input type="tablet" bus="usb"></input>
  </devices>
  <qemu:commandline>
    <arg value="-foreign"></arg>
    <arg value="kept"></arg>
    <env name="KEPT" value="1"></env>
  </qemu:commandline>
</domain>`

func TestApplyKeepsWhatItDoesNotOwn(t *testing.T) {
	out, err := Apply(smallDomain, baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<arg value="-foreign"></arg>`, `<arg value="kept"></arg>`, `<env name="KEPT" value="1"></env>`,
		`<uid>abc</uid>`, `<mac address="02:00:00:aa:bb:cc"></mac>`, `<target dev="tap0" managed="no"></target>`,
		`<address type="pci" domain="0x0000" bus="0x01" slot="0x00" function="0x0"></address>`, `<model type="vmxnet3"></model>`,
		`<input type="tablet" bus="usb"></input>`, `<emulator>/usr/libexec/qemu-kvm</emulator>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `<driver name="vhost"`) {
		t.Error("virtio driver options were kept on a vmxnet3 interface")
	}
	if strings.Count(out, `value="-cpu"`) != 1 {
		t.Error("not exactly one -cpu argument")
	}
}

func TestApplyRefusesWhatItCannotApply(t *testing.T) {
	tests := map[string]struct {
		domain string
		mutate func(*contract.Config)
		want   string
	}{
		"malformed XML":          {"<domain><devices>", nil, "parsing the domain XML"},
		"not a domain":           {"<network></network>", nil, "parsing the domain XML"},
		"no devices":             {`<domain type="kvm"><name>x</name></domain>`, nil, "has no <devices>"},
		"unknown CPU model":      {smallDomain, func(c *contract.Config) { c.CPU.Model = "Zen4" }, `cpu.model "Zen4" is not supported`},
		"unknown NIC model":      {smallDomain, func(c *contract.Config) { c.NIC.Model = "rtl8139" }, `nic.model "rtl8139" is not supported`},
		"unknown SMC mode":       {smallDomain, func(c *contract.Config) { c.SMC.Mode = "FakeSMC" }, `smc.mode "FakeSMC" is not supported`},
		"unknown display":        {smallDomain, func(c *contract.Config) { c.Display.Model = "cirrus" }, `display.model "cirrus" is not supported`},
		"AppleSMC without OSK":   {smallDomain, func(c *contract.Config) { c.SMC.Mode = "AppleSMC" }, "smc.osk (AppleSMC mode) is required"},
		"missing serial":         {smallDomain, func(c *contract.Config) { c.SMBIOS.Serial = "" }, "smbios.serial is required"},
		"UUID of another domain": {smallDomain, func(c *contract.Config) { c.SMBIOS.UUID = "00000000-0000-4000-8000-000000000000" }, "differs from the domain's UUID"},
		"no interface": {strings.Replace(smallDomain, smallDomain[strings.Index(smallDomain, "<interface"):strings.Index(smallDomain, "</interface>")+len("</interface>")], "", 1),
			nil, "no network interface"},
		"no USB controller": {strings.Replace(smallDomain, `<controller type="usb" index="0" model="qemu-xhci"></controller>`, `<controller type="usb" index="0" model="none"></controller>`, 1),
			nil, "no USB controller"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig()
			if tc.mutate != nil {
				tc.mutate(cfg)
			}
			out, err := Apply(tc.domain, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("a partial result was returned with the error: %s", out)
			}
		})
	}
	if _, err := Apply(smallDomain, nil); err == nil {
		t.Error("a nil configuration was accepted")
	}
}

func vmiJSON(t testing.TB, annotations map[string]string) []byte {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "m", "namespace": "ns", "annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfigFromVMI(t *testing.T) {
	raw, err := baseConfig().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromVMI(vmiJSON(t, map[string]string{contract.Annotation: raw}))
	if err != nil || cfg.SMBIOS.Serial != "C02XK1ZJHX87" {
		t.Fatalf("config %+v, err %v", cfg, err)
	}
	for name, tc := range map[string]struct {
		vmi  []byte
		want string
	}{
		"malformed JSON":      {[]byte(`{"metadata":`), "parsing the VMI JSON"},
		"no annotation":       {vmiJSON(t, nil), "VMI ns/m has no macvirt.io/domain-hook annotation"},
		"unknown version":     {vmiJSON(t, map[string]string{contract.Annotation: strings.Replace(raw, `"v1"`, `"v9"`, 1)}), `version "v9"`},
		"unknown field":       {vmiJSON(t, map[string]string{contract.Annotation: strings.Replace(raw, `{`, `{"extra":1,`, 1)}), "unknown field"},
		"annotation not JSON": {vmiJSON(t, map[string]string{contract.Annotation: "cpu=Penryn"}), "decoding macvirt.io/domain-hook"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ConfigFromVMI(tc.vmi); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// FuzzApply feeds arbitrary domain XML and configuration JSON through the
// hook's parsing: no panic, and a domain it accepts, applied again, does
// not change.
func FuzzApply(f *testing.F) {
	raw, err := baseConfig().Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(smallDomain, raw)
	f.Add("<domain><devices><interface type='user'/></devices></domain>", raw)
	f.Add(smallDomain, `{"version":"v1","smc":{"mode":"AppleSMC","osk":"a,b"}}`)
	f.Fuzz(func(t *testing.T, domain, config string) {
		cfg, err := ConfigFromVMI(vmiJSON(t, map[string]string{contract.Annotation: config}))
		if err != nil {
			return
		}
		out, err := Apply(domain, cfg)
		if err != nil {
			return
		}
		again, err := Apply(out, cfg)
		if err != nil {
			t.Fatalf("output of Apply refused on a second pass: %v\n%s", err, out)
		}
		if again != out {
			t.Fatalf("not idempotent:\n%s\n---\n%s", out, again)
		}
	})
}
