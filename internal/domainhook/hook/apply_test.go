package hook

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/domainhook/contract/contracttest"
)

var update = flag.Bool("update", false, "rewrite the golden files from Apply's output")

// appleOSK is the well-known OSK string the isa-applesmc device takes.
const appleOSK = "ourhardworkbythesewordsguardedpleasedontsteal(c)AppleComputerInc"

// baseConfig is the configuration of the rendered default class; its UUID
// is the one of every fixture's domain.
func baseConfig() *contract.Config { return contracttest.Config() }

// variants are the golden cases: every CPU model, NIC model, SMC mode and
// display, and the emulator override, each applied to a KubeVirt domain.
var variants = []struct {
	name    string
	fixture string
	mutate  func(*contract.Config)
}{
	{"haswell-vmxnet3-virtualsmc-vga", "default", func(*contract.Config) {}},
	{"penryn-e1000", "default", func(c *contract.Config) {
		c.CPU.Model, c.NIC.Model = "Penryn", "e1000-82545em"
	}},
	{"skylake-virtio", "virtio-penryn-http", func(c *contract.Config) {
		c.CPU.Model, c.NIC.Model = "Skylake-Client-noTSX-IBRS", "virtio"
	}},
	{"host-passthrough", "e1000-host-passthrough-stopped", func(c *contract.Config) {
		c.CPU.Model, c.NIC.Model = "host-passthrough", "e1000-82545em"
	}},
	{"applesmc-vmware-svga-emulator", "applesmc-vmware-svga", func(c *contract.Config) {
		c.SMC = contract.SMC{Mode: "AppleSMC", OSK: appleOSK}
		c.Display.Model = "vmware-svga"
		c.Emulator = "/opt/qemu/bin/qemu-system-x86_64"
	}},
}

// releaseVariants are, for each macOS release macvirt knows, its default
// hardware (api/v1alpha1.MacOSReleases) applied to the fixture KubeVirt
// made from that release's golden rendering.
func releaseVariants() []struct {
	name    string
	fixture string
	mutate  func(*contract.Config)
} {
	var out []struct {
		name    string
		fixture string
		mutate  func(*contract.Config)
	}
	for _, r := range slices.Sorted(maps.Keys(macvirtv1alpha1.MacOSReleases)) {
		info := macvirtv1alpha1.MacOSReleases[r]
		out = append(out, struct {
			name    string
			fixture string
			mutate  func(*contract.Config)
		}{"macos-" + string(r), "macos-" + string(r), func(c *contract.Config) {
			c.CPU.Model, c.NIC.Model, c.SMBIOS.Product = string(info.CPUModel), string(info.NICModel), info.ProductName
		}})
	}
	return out
}

func init() { variants = append(variants, releaseVariants()...) }

func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kubevirt", name+".domain.xml")) //nolint:gosec // a fixture name of this package.
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// applyVariant applies the base configuration, changed by mutate, to a fixture.
func applyVariant(t *testing.T, fixtureName string, mutate func(*contract.Config)) (*contract.Config, string) {
	t.Helper()
	cfg := baseConfig()
	mutate(cfg)
	out, err := Apply(fixture(t, fixtureName), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, out
}

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".xml") }

func TestGoldenDomains(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg, out := applyVariant(t, v.fixture, v.mutate)
			if *update {
				if err := os.MkdirAll(filepath.Dir(goldenPath(v.name)), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(goldenPath(v.name), []byte(out), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(goldenPath(v.name))
			if err != nil {
				t.Fatalf("%v (run go test ./internal/domainhook -run TestGoldenDomains -update)", err)
			}
			if out != string(want) {
				t.Errorf("Apply output differs from %s; review and run with -update:\n%s", goldenPath(v.name), out)
			}
			again, err := Apply(out, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if again != out {
				t.Errorf("applying twice differs from applying once:\n%s", again)
			}
		})
	}
}

// TestApplySetsWhatTheConfigSays checks each setting in the output of the
// variant that has it, independently of the golden files.
func TestApplySetsWhatTheConfigSays(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cfg, out := applyVariant(t, v.fixture, v.mutate)
			want := []string{
				`<commandline xmlns="http://libvirt.org/schemas/domain/qemu/1.0">`, `<arg value="-cpu"></arg>`, "vendor=GenuineIntel,+invtsc,vmware-cpuid-freq=on",
				`<arg value="type=2,manufacturer=Apple Inc.,product=` + strings.ReplaceAll(cfg.SMBIOS.Product, ",", ",,") + `,serial=C02123ABCDEHX87FG"></arg>`,
				`<entry name="manufacturer">Apple Inc.</entry>`, `<entry name="product">` + cfg.SMBIOS.Product + `</entry>`,
				`<entry name="serial">C02XK1ZJHX87</entry>`, `<entry name="uuid">5B3E8F7A-2C41-4D9E-8F0A-1B2C3D4E5F60</entry>`,
				`<smbios mode="sysinfo"></smbios>`, `<input type="keyboard" bus="usb"></input>`,
			}
			cpu := map[string]string{"Haswell-noTSX": "Haswell-noTSX,", "Penryn": "Penryn,", "Skylake-Client-noTSX-IBRS": "Skylake-Client-noTSX-IBRS,",
				"host-passthrough": `"host,vendor`}[cfg.CPU.Model]
			want = append(want, cpu)
			if cfg.NIC.Model != "virtio" {
				want = append(want, `<model type="`+cfg.NIC.Model+`"></model>`)
			}
			if cfg.SMC.Mode == "AppleSMC" {
				want = append(want, `<arg value="isa-applesmc,osk=`+appleOSK+`"></arg>`)
			}
			if cfg.Display.Model == "vmware-svga" {
				want = append(want, `<model type="vmvga"`)
			}
			if cfg.Emulator != "" {
				want = append(want, "<emulator>"+cfg.Emulator+"</emulator>")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %s", w)
				}
			}
			if cfg.SMC.Mode != "AppleSMC" && strings.Contains(out, "isa-applesmc") {
				t.Error("isa-applesmc added in VirtualSMC mode")
			}
		})
	}
}

// TestFixturesAreFromTheCurrentRenderings fails when a rendering changed
// after its domain fixture was generated.
func TestFixturesAreFromTheCurrentRenderings(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "kubevirt", "*.domain.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures (%v)", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".domain.xml")
		rendering, err := os.ReadFile(filepath.Join("..", "..", "render", "testdata", name+".yaml")) //nolint:gosec // a fixture name of this package.
		if err != nil {
			t.Errorf("%s has no rendering: %v", f, err)
			continue
		}
		want := fmt.Sprintf("(sha256 %x)", sha256.Sum256(rendering))
		if first, _, _ := strings.Cut(fixture(t, name), "\n"); !strings.Contains(first, want) {
			t.Errorf("%s was generated from another version of internal/render/testdata/%s.yaml; run make domain-fixtures", f, name)
		}
	}
}

// TestReleaseVariantsAreWhatTheRendererAsksFor checks that each release
// variant applies the CPU, NIC and SMBIOS model the renderer writes for that
// release (the domain-hook annotation of internal/render/testdata/
// macos-<release>.yaml), so the hook and QEMU tests exercise what a class
// of that release really renders.
func TestReleaseVariantsAreWhatTheRendererAsksFor(t *testing.T) {
	for _, v := range releaseVariants() {
		t.Run(v.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "render", "testdata", v.fixture+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(raw), "\n---\n")
			vm := &kubevirtv1.VirtualMachine{}
			if err := yaml.Unmarshal([]byte(first), vm); err != nil {
				t.Fatal(err)
			}
			rendered, err := contract.Parse(vm.Spec.Template.ObjectMeta.Annotations[contract.Annotation])
			if err != nil {
				t.Fatal(err)
			}
			cfg := baseConfig()
			v.mutate(cfg)
			if cfg.CPU.Model != rendered.CPU.Model || cfg.NIC.Model != rendered.NIC.Model || cfg.SMBIOS.Product != rendered.SMBIOS.Product {
				t.Errorf("variant applies %s/%s/%s; the renderer asks for %s/%s/%s", cfg.CPU.Model, cfg.NIC.Model, cfg.SMBIOS.Product,
					rendered.CPU.Model, rendered.NIC.Model, rendered.SMBIOS.Product)
			}
		})
	}
}
