package render_test

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current render output")

// goldenCase is one class/machine combination whose rendering is kept in
// testdata/<name>.yaml, reviewed like code, and created in a real API
// server with KubeVirt's and CDI's schemas by the envtest suite.
type goldenCase struct {
	name    string
	class   *macvirtv1alpha1.MacClass
	machine *macvirtv1alpha1.MacMachine
	opts    render.Options
}

func goldenCases() []goldenCase {
	appleOpts := testOptions
	appleOpts.OSK = "test-osk-not-a-real-key"
	appleOpts.EmulatorPath = "/opt/qemu/bin/qemu-system-x86_64"
	cases := []goldenCase{
		{name: "default", class: testClass(), machine: testMachine(), opts: testOptions},
		{name: "applesmc-vmware-svga", class: testClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.SMC = macvirtv1alpha1.SMCSpec{Mode: macvirtv1alpha1.SMCModeAppleSMC,
				OSKSecretRef: &macvirtv1alpha1.SecretKeyRef{Namespace: "macvirt-system", Name: "apple-osk", Key: "osk"}}
			c.Spec.Hardware.Display.Model = macvirtv1alpha1.DisplayModelVMwareSVGA
		}), machine: testMachine(), opts: appleOpts},
		{name: "virtio-penryn-http", class: testClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.NICModel = macvirtv1alpha1.NICModelVirtio
			c.Spec.Hardware.DiskBus = macvirtv1alpha1.DiskBusVirtio
			c.Spec.Hardware.CPUModel = macvirtv1alpha1.CPUModelPenryn
			c.Spec.Image.SourceRef = nil
			c.Spec.Image.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "https://images.example.com/sonoma.qcow2"}}
			c.Spec.Image.StorageClassName = ptr("fast-rbd")
		}), machine: testMachine(), opts: testOptions},
		{name: "e1000-host-passthrough-stopped", class: testClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.Hardware.NICModel = macvirtv1alpha1.NICModelE1000
			c.Spec.Hardware.CPUModel = macvirtv1alpha1.CPUModelHostPassthrough
			c.Spec.Resources.CPU = 8
			c.Spec.Bootloader.SourceRef = nil
			c.Spec.Bootloader.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr("docker://quay.io/macvirt/opencore:1.0")}}
		}), machine: testMachine(func(m *macvirtv1alpha1.MacMachine) {
			m.Spec.Running = ptr(false)
			m.Labels = nil
		}), opts: testOptions},
	}
	// Each macOS release with the hardware its table entry defaults to.
	releases := slices.Sorted(maps.Keys(macvirtv1alpha1.MacOSReleases))
	for _, r := range releases {
		cases = append(cases, goldenCase{name: "macos-" + string(r), class: testClass(func(c *macvirtv1alpha1.MacClass) {
			c.Spec.MacOS = &macvirtv1alpha1.MacOSSpec{Release: r}
			c.Spec.Hardware.CPUModel, c.Spec.Hardware.NICModel, c.Spec.Hardware.SMBIOS.ProductName = "", "", ""
		}), machine: testMachine(), opts: testOptions})
	}
	return cases
}

// renderYAML renders a case as a multi-document YAML file: the VM, then
// the DataVolumes.
func renderYAML(t *testing.T, c goldenCase) []byte {
	t.Helper()
	vm, dvs, err := render.VirtualMachine(c.class, c.machine, c.opts)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	var buf bytes.Buffer
	objs := []any{vm}
	for i := range dvs {
		objs = append(objs, &dvs[i])
	}
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes()
}

func TestGoldenRenderings(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			got := renderYAML(t, c)
			path := filepath.Join("testdata", c.name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path) //nolint:gosec // path is testdata/<case>.yaml.
			if err != nil {
				t.Fatalf("reading %s (run go test ./internal/render -update to create it): %v", path, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render output differs from %s; review and run go test ./internal/render -update\n--- got:\n%s", path, got)
			}
		})
	}
}

func TestGoldenFilesHaveNoStrayCase(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range goldenCases() {
		known[filepath.Join("testdata", c.name+".yaml")] = true
	}
	for _, f := range files {
		if !known[f] {
			t.Errorf("%s has no golden case; delete it or add the case", f)
		}
	}
}
