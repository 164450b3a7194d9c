package argocd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/argocdhealth"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// kinds lists the four kinds the health check serves, the fixtures each
// must have at least, and the statuses those fixtures must cover between
// them.
var kinds = []struct {
	kind, fixtures string
	minFixtures    int
	statuses       []string
}{
	{"MacClass", "macclass", 7, []string{"Healthy", "Progressing", "Degraded"}},
	{"MacPool", "macpool", 10, []string{"Healthy", "Progressing", "Degraded", "Suspended"}},
	{"MacClaim", "macclaim", 9, []string{"Healthy", "Progressing", "Degraded"}},
	{"MacMachine", "macmachine", 12, []string{"Healthy", "Progressing", "Degraded", "Suspended"}},
}

// healthStatuses are the statuses Argo CD accepts from a health script
// (besides Unknown and Missing, which these checks never return).
var healthStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended"}

// fixture is one file of testdata/<kind>: a whole object and the health
// the check must report for it.
type fixture struct {
	Expect struct {
		Status          string `json:"status"`
		MessageContains string `json:"messageContains"`
	} `json:"expect"`
	Object map[string]any `json:"object"`
}

// loadFixture reads one fixture file, refusing unknown fields.
func loadFixture(t *testing.T, file string) fixture {
	t.Helper()
	var f fixture
	b, err := os.ReadFile(file) //nolint:gosec // the package's own testdata.
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return f
}

func readScript(t *testing.T) string {
	t.Helper()
	script, err := argocdhealth.Script()
	if err != nil {
		t.Fatal(err)
	}
	return script
}

func TestHealthChecks(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) {
			script := readScript(t)
			files, err := filepath.Glob(filepath.Join("testdata", k.fixtures, "*.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if len(files) < k.minFixtures {
				t.Fatalf("found %d fixtures in testdata/%s, want at least %d", len(files), k.fixtures, k.minFixtures)
			}
			seen, deleting := map[string]bool{}, 0
			for _, file := range files {
				f := loadFixture(t, file)
				if !slices.Contains(healthStatuses, f.Expect.Status) || f.Expect.MessageContains == "" {
					t.Fatalf("%s: expect needs a status out of %v and a messageContains", file, healthStatuses)
				}
				if f.Object["apiVersion"] != "macvirt.io/v1alpha1" || f.Object["kind"] != k.kind {
					t.Fatalf("%s: object is %v %v, want macvirt.io/v1alpha1 %s", file, f.Object["apiVersion"], f.Object["kind"], k.kind)
				}
				seen[f.Expect.Status] = true
				if meta, _ := f.Object["metadata"].(map[string]any); meta["deletionTimestamp"] != nil {
					deleting++
				}
				t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
					status, message, err := argocdhealth.Run(script, f.Object)
					if err != nil {
						t.Fatalf("health.lua: %v", err)
					}
					if status != f.Expect.Status || !strings.Contains(message, f.Expect.MessageContains) {
						t.Errorf("health = %s %q, want %s with %q", status, message, f.Expect.Status, f.Expect.MessageContains)
					}
				})
			}
			for _, s := range k.statuses {
				if !seen[s] {
					t.Errorf("no fixture in testdata/%s expects %s", k.fixtures, s)
				}
			}
			// Argo CD runs health checks on objects being deleted as well.
			if deleting == 0 {
				t.Errorf("no fixture in testdata/%s is being deleted", k.fixtures)
			}
		})
	}
}

// TestComponentMergesIntoArgoCDConfigMap builds an Argo CD installation
// that uses config/argocd as a component, the way its kustomization comment
// says, and checks the script lands in argocd-cm under the four kinds'
// keys, next to its own keys.
func TestComponentMergesIntoArgoCDConfigMap(t *testing.T) {
	root := cluster.RepoRoot()
	dir := t.TempDir()
	component, err := filepath.Rel(dir, filepath.Join(root, "config", "argocd"))
	if err != nil {
		t.Fatal(err)
	}
	// Argo CD's install manifests leave the namespace to the kustomization.
	files := map[string]string{
		"argocd-cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  labels:
    app.kubernetes.io/part-of: argocd
data:
  url: https://argocd.example.com
`,
		"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argocd
resources:
  - argocd-cm.yaml
components:
  - %s
`, filepath.ToSlash(component)),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cluster.KustomizeBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	if docs := bytes.Count(out, []byte("\n---\n")) + 1; docs != 1 {
		t.Fatalf("kustomize built %d objects, want only argocd-cm:\n%s", docs, out)
	}
	var cm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Name != "argocd-cm" || cm.Metadata.Namespace != "argocd" ||
		cm.Metadata.Labels["app.kubernetes.io/part-of"] != "argocd" {
		t.Errorf("built %s %s/%s with labels %v, want the ConfigMap argocd/argocd-cm with its labels", cm.Kind, cm.Metadata.Namespace, cm.Metadata.Name, cm.Metadata.Labels)
	}
	want := map[string]string{"url": "https://argocd.example.com"}
	for _, k := range kinds {
		want["resource.customizations.health.macvirt.io_"+k.kind] = readScript(t)
	}
	for key, value := range want {
		if got, ok := cm.Data[key]; !ok {
			t.Errorf("argocd-cm lacks %s", key)
		} else if got != value {
			t.Errorf("argocd-cm %s differs from the file:\n%s", key, got)
		}
	}
	for key := range cm.Data {
		if _, ok := want[key]; !ok {
			t.Errorf("argocd-cm has the unexpected key %s", key)
		}
	}
}
