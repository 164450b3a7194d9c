package argocd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/argocdhealth"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

var update = flag.Bool("update", false, "rewrite config/argocd/upstream from the script and testdata/")

// upstreamDir is the health checks in Argo CD's own layout
// (resource_customizations/<group>/<kind>/ with health.lua,
// health_test.yaml and testdata/), ready to be offered to Argo CD.
var upstreamDir = filepath.Join(cluster.RepoRoot(), "config", "argocd", "upstream", "resource_customizations", "macvirt.io")

// upstreamTest is one entry of Argo CD's health_test.yaml.
type upstreamTest struct {
	HealthStatus struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	} `json:"healthStatus"`
	InputPath string `json:"inputPath"`
}

// upstreamFiles lays out, per kind, what Argo CD's TestLuaHealthScript
// reads: the script, each fixture's object alone, and health_test.yaml
// with the status this package's fixture expects and the exact message the
// script gives (Argo CD compares both exactly).
func upstreamFiles(t *testing.T) map[string][]byte {
	t.Helper()
	script := readScript(t)
	out := map[string][]byte{}
	for _, k := range kinds {
		files, err := filepath.Glob(filepath.Join("testdata", k.fixtures, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tests []upstreamTest
		for _, file := range files {
			f := loadFixture(t, file)
			status, message, err := argocdhealth.Run(script, f.Object)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if status != f.Expect.Status || !strings.Contains(message, f.Expect.MessageContains) {
				t.Fatalf("%s: the script says %s %q, the fixture expects %s with %q (TestHealthChecks)", file, status, message, f.Expect.Status, f.Expect.MessageContains)
			}
			obj, err := yaml.Marshal(f.Object)
			if err != nil {
				t.Fatal(err)
			}
			input := filepath.ToSlash(filepath.Join("testdata", filepath.Base(file)))
			out[filepath.Join(k.kind, input)] = obj
			var e upstreamTest
			e.HealthStatus.Status, e.HealthStatus.Message, e.InputPath = status, message, input
			tests = append(tests, e)
		}
		b, err := yaml.Marshal(map[string]any{"tests": tests})
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Join(k.kind, "health_test.yaml")] = b
		out[filepath.Join(k.kind, "health.lua")] = []byte(script)
	}
	return out
}

// TestUpstreamLayoutIsCurrent holds config/argocd/upstream to the script
// and the fixtures (`make golden` rewrites it), and checks it the way Argo
// CD's own test would: every kind's folder has health.lua and
// health_test.yaml, every inputPath exists and holds an object of that
// kind, and the script returns exactly the recorded status and message.
func TestUpstreamLayoutIsCurrent(t *testing.T) {
	want := upstreamFiles(t)
	if *update {
		if err := os.RemoveAll(upstreamDir); err != nil {
			t.Fatal(err)
		}
		for name, b := range want {
			path := filepath.Join(upstreamDir, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string][]byte{}
	err := filepath.WalkDir(upstreamDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(upstreamDir, path)
		if err != nil {
			return err
		}
		got[rel], err = os.ReadFile(path) //nolint:gosec // the walked repository folder.
		return err
	})
	if err != nil {
		t.Fatalf("%v (run make golden)", err)
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("config/argocd/upstream/resource_customizations/macvirt.io/%s is out of date: run make golden", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("config/argocd/upstream/resource_customizations/macvirt.io/%s is not made from anything: run make golden", name)
		}
	}

	// As Argo CD's TestLuaHealthScript runs it.
	for _, k := range kinds {
		dir := filepath.Join(upstreamDir, k.kind)
		script, err := os.ReadFile(filepath.Join(dir, "health.lua")) //nolint:gosec // a repository file.
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml")) //nolint:gosec // a repository file.
		if err != nil {
			t.Fatal(err)
		}
		var spec struct {
			Tests []upstreamTest `json:"tests"`
		}
		if err := yaml.UnmarshalStrict(raw, &spec); err != nil {
			t.Fatalf("%s/health_test.yaml: %v", k.kind, err)
		}
		if len(spec.Tests) < k.minFixtures {
			t.Errorf("%s/health_test.yaml has %d tests, want at least %d", k.kind, len(spec.Tests), k.minFixtures)
		}
		for _, tc := range spec.Tests {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(tc.InputPath))) //nolint:gosec // a repository file.
			if err != nil {
				t.Errorf("%s: %v", k.kind, err)
				continue
			}
			var obj map[string]any
			if err := yaml.Unmarshal(b, &obj); err != nil {
				t.Fatalf("%s/%s: %v", k.kind, tc.InputPath, err)
			}
			if obj["apiVersion"] != "macvirt.io/v1alpha1" || obj["kind"] != k.kind {
				t.Errorf("%s/%s holds %v %v; Argo CD finds the script by the object's group and kind", k.kind, tc.InputPath, obj["apiVersion"], obj["kind"])
			}
			status, message, err := argocdhealth.Run(string(script), obj)
			if err != nil {
				t.Fatalf("%s/%s: %v", k.kind, tc.InputPath, err)
			}
			if status != tc.HealthStatus.Status || message != tc.HealthStatus.Message {
				t.Errorf("%s/%s: %s %q, health_test.yaml says %s %q", k.kind, tc.InputPath, status, message, tc.HealthStatus.Status, tc.HealthStatus.Message)
			}
		}
	}
}
