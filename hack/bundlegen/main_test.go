package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func manifests(t *testing.T) []byte {
	t.Helper()
	out, err := cluster.KustomizeBuild("config/manifests")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func opts(dir string) options {
	return options{Version: "0.1.0", Image: "ghcr.io/macvirt/macvirt-manager:v0.1.0", HookImage: "ghcr.io/macvirt/macvirt-domain-hook:v0.1.0",
		Package: "macvirt", Channels: "alpha", DefaultChannel: "alpha", Icon: filepath.Join(cluster.RepoRoot(), "config", "manifests", "icon.svg"),
		OutDir: filepath.Join(dir, "bundle"), Dockerfile: filepath.Join(dir, "bundle.Dockerfile")}
}

// TestRunIsRepeatable: two runs write the same bytes, and a stale file in
// bundle/manifests does not survive.
func TestRunIsRepeatable(t *testing.T) {
	in := manifests(t)
	dir := t.TempDir()
	o := opts(dir)
	if err := os.MkdirAll(filepath.Join(o.OutDir, "manifests"), 0o750); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(o.OutDir, "manifests", "old_v1_service.yaml")
	if err := os.WriteFile(stale, []byte("kind: Service\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(bytes.NewReader(in), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a file from an earlier bundle survived")
	}
	first, err := os.ReadFile(filepath.Join(o.OutDir, "manifests", "macvirt.clusterserviceversion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := run(bytes.NewReader(in), o); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(o.OutDir, "manifests", "macvirt.clusterserviceversion.yaml"))
	if !bytes.Equal(first, second) {
		t.Error("two runs wrote different CSVs")
	}
	for _, want := range []string{"name: macvirt.v0.1.0", "containerImage: ghcr.io/macvirt/macvirt-manager:v0.1.0", "webhookdefinitions:", "clusterPermissions:",
		"containerPort: 9445\n      deploymentName: macvirt-controller-manager", "--tunnel-cert-path=/apiserver.local.config/certificates"} {
		if !bytes.Contains(first, []byte(want)) {
			t.Errorf("the CSV lacks %q", want)
		}
	}
	if bytes.Contains(first, []byte("creationTimestamp")) {
		t.Error("the CSV carries empty creationTimestamps")
	}
	// OLM makes the APIService's Service and the kube-system binding; the
	// bundle ships neither.
	files, err := os.ReadDir(filepath.Join(o.OutDir, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(f.Name(), "tunnel") || strings.Contains(f.Name(), "front-proxy-trust-reader") || strings.Contains(f.Name(), "apiservice") {
			t.Errorf("the bundle ships %s, which OLM makes for the owned APIService", f.Name())
		}
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	in := string(manifests(t))
	docs := strings.Split(in, "\n---\n")
	without := func(kind string) string {
		var keep []string
		for _, d := range docs {
			if !strings.Contains(d, "\nkind: "+kind+"\n") && !strings.HasPrefix(d, "kind: "+kind+"\n") {
				keep = append(keep, d)
			}
		}
		return strings.Join(keep, "\n---\n")
	}
	for name, c := range map[string]struct {
		input string
		mod   func(*options)
		want  string
	}{
		"bad version":        {in, func(o *options) { o.Version = "v1" }, "--version"},
		"no image":           {in, func(o *options) { o.Image = "" }, "--image and --hook-image are required"},
		"no CSV base":        {without("ClusterServiceVersion"), nil, "no ClusterServiceVersion base"},
		"no Deployment":      {without("Deployment"), nil, "want exactly one Deployment, found 0"},
		"bound role absent":  {without("ClusterRole"), nil, "which is not in the input"},
		"CRD missing":        {without("CustomResourceDefinition"), nil, "the CSV base owns 8 CRDs, the input has 0"},
		"APIService missing": {without("APIService"), nil, "the CSV base owns APIService v1alpha1.subresources.macvirt.io, which is not in the input"},
		"APIService's Service missing": {strings.Replace(in, "name: macvirt-tunnel\n  namespace: macvirt-system\nspec:", "name: elsewhere\n  namespace: macvirt-system\nspec:", 1), nil,
			"names Service macvirt-tunnel, which is not in the input"},
		"APIService not in the CSV base": {strings.Replace(in, "group: subresources.macvirt.io\n  groupPriorityMinimum", "group: other.macvirt.io\n  groupPriorityMinimum", 1), nil,
			"has no apiservicedefinitions.owned entry in the CSV base (group other.macvirt.io"},
		"not YAML": {"kind: [", nil, "decoding the kustomize output"},
	} {
		t.Run(name, func(t *testing.T) {
			o := opts(t.TempDir())
			if c.mod != nil {
				c.mod(&o)
			}
			err := run(strings.NewReader(c.input), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestCatalogTemplate(t *testing.T) {
	o := options{Version: "0.2.0", Package: "macvirt", DefaultChannel: "alpha", Replaces: "macvirt.v0.1.0", SkipRange: "<0.2.0",
		BundleImage: "registry.example/macvirt-bundle@sha256:ab"}
	b, err := catalogTemplate(o)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Schema  string `json:"schema"`
		Entries []struct {
			Schema         string `json:"schema"`
			Name           string `json:"name"`
			Package        string `json:"package"`
			DefaultChannel string `json:"defaultChannel"`
			Image          string `json:"image"`
			Entries        []struct {
				Name      string `json:"name"`
				Replaces  string `json:"replaces"`
				SkipRange string `json:"skipRange"`
			} `json:"entries"`
		} `json:"entries"`
	}
	if err := yaml.UnmarshalStrict(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.Schema != "olm.template.basic" || len(got.Entries) != 3 {
		t.Fatalf("not a basic template of a package, a channel and a bundle:\n%s", b)
	}
	pkg, ch, bundle := got.Entries[0], got.Entries[1], got.Entries[2]
	if pkg.Schema != "olm.package" || pkg.Name != "macvirt" || pkg.DefaultChannel != "alpha" {
		t.Errorf("package entry %+v", pkg)
	}
	if ch.Schema != "olm.channel" || ch.Package != "macvirt" || ch.Name != "alpha" || len(ch.Entries) != 1 ||
		ch.Entries[0].Name != "macvirt.v0.2.0" || ch.Entries[0].Replaces != "macvirt.v0.1.0" || ch.Entries[0].SkipRange != "<0.2.0" {
		t.Errorf("channel entry %+v", ch)
	}
	if bundle.Schema != "olm.bundle" || bundle.Image != o.BundleImage {
		t.Errorf("bundle entry %+v", bundle)
	}
	if _, err := catalogTemplate(options{Version: "0.2.0"}); err == nil {
		t.Error("a template without a bundle image was written")
	}
}

func TestUpgradeGraphFlags(t *testing.T) {
	for _, tc := range []struct {
		o  options
		ok bool
	}{
		{options{Version: "0.2.0", Package: "macvirt", SkipRange: "<0.2.0", Replaces: "macvirt.v0.1.0"}, true},
		{options{Version: "0.2.0", Package: "macvirt"}, true},
		{options{Version: "0.2.0", Package: "macvirt", SkipRange: "<=0.2.0"}, false},
		{options{Version: "0.2.0", Package: "macvirt", SkipRange: "not a range"}, false},
		{options{Version: "0.2.0", Package: "macvirt", Replaces: "other.v0.1.0"}, false},
	} {
		if err := tc.o.checkUpgradeGraph(); (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok %v", tc.o, err, tc.ok)
		}
	}
}

func TestHookImagesByKubeVirt(t *testing.T) {
	o := options{HookImage: "r/h@sha256:19", HookImagesByKubeVirt: "1.8=r/h@sha256:18, 1.7=r/h@sha256:17"}
	env, err := o.hookImageEnv()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range env {
		got = append(got, e.Name+"="+e.Value)
	}
	want := []string{"RELATED_IMAGE_DOMAIN_HOOK=r/h@sha256:19", "RELATED_IMAGE_DOMAIN_HOOK_KUBEVIRT_1_7=r/h@sha256:17", "RELATED_IMAGE_DOMAIN_HOOK_KUBEVIRT_1_8=r/h@sha256:18"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("env %v, want %v", got, want)
	}
	for _, bad := range []string{"1.8", "1.8=", "one=r/h", "1=r/h", "1.8.0=r/h", "v1.8=r/h", "1.08=r/h", "01.8=r/h"} {
		if _, err := (options{HookImagesByKubeVirt: bad}).hookImagesByKubeVirt(); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
