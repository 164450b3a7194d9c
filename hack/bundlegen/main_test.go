package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macvirt/macvirt/internal/testenv"
)

func manifests(t *testing.T) []byte {
	t.Helper()
	out, err := testenv.KustomizeBuild("config/manifests")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func opts(dir string) options {
	return options{Version: "0.1.0", Image: "ghcr.io/macvirt/macvirt-manager:v0.1.0", HookImage: "ghcr.io/macvirt/macvirt-domain-hook:v0.1.0",
		Package: "macvirt", Channels: "alpha", DefaultChannel: "alpha", Icon: filepath.Join(testenv.RepoRoot(), "config", "manifests", "icon.svg"),
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
	for _, want := range []string{"name: macvirt.v0.1.0", "containerImage: ghcr.io/macvirt/macvirt-manager:v0.1.0", "webhookdefinitions:", "clusterPermissions:"} {
		if !bytes.Contains(first, []byte(want)) {
			t.Errorf("the CSV lacks %q", want)
		}
	}
	if bytes.Contains(first, []byte("creationTimestamp")) {
		t.Error("the CSV carries empty creationTimestamps")
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
		"bad version":       {in, func(o *options) { o.Version = "v1" }, "--version"},
		"no image":          {in, func(o *options) { o.Image = "" }, "--image and --hook-image are required"},
		"no CSV base":       {without("ClusterServiceVersion"), nil, "no ClusterServiceVersion base"},
		"no Deployment":     {without("Deployment"), nil, "want exactly one Deployment, found 0"},
		"bound role absent": {without("ClusterRole"), nil, "which is not in the input"},
		"CRD missing":       {without("CustomResourceDefinition"), nil, "the CSV base owns 4 CRDs, the input has 0"},
		"not YAML":          {"kind: [", nil, "decoding the kustomize output"},
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
