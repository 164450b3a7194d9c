package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// installDocs are the pages an admin installs macvirt from.
var installDocs = []string{"README.md", "docs/install.md", "docs/tenancy.md", "docs/domain-hook.md", "docs/github-actions.md"}

// makeVar is the default of a Makefile variable (VAR ?= value).
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` \?= (.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("the Makefile sets no default for %s", name)
	}
	return strings.TrimSpace(m[1])
}

// yamlBlocks are the objects of a page's yaml code blocks.
func yamlBlocks(t *testing.T, doc string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range regexp.MustCompile("(?s)```yaml\\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		for _, part := range strings.Split(m[1], "\n---\n") {
			obj := map[string]any{}
			if err := yaml.Unmarshal([]byte(part), &obj); err != nil {
				t.Fatalf("a yaml block does not parse: %v\n%s", err, part)
			}
			out = append(out, obj)
		}
	}
	return out
}

func field(obj map[string]any, path ...string) string {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// TestTheOLMPathSubscribesToTheCatalogAReleasePublishes: the CatalogSource
// of docs/install.md serves the catalog image the release workflow pushes,
// and the Subscription names that source and the bundle's package and
// channel.
func TestTheOLMPathSubscribesToTheCatalogAReleasePublishes(t *testing.T) {
	makefile := read(t, "Makefile")
	release := read(t, ".github/workflows/release.yml")
	if !strings.Contains(release, `-t "${IMAGE_REGISTRY}/macvirt-catalog:${GITHUB_REF_NAME}"`) {
		t.Fatal("the release workflow no longer pushes ${IMAGE_REGISTRY}/macvirt-catalog:<tag>; update docs/install.md and this test")
	}
	if !strings.Contains(release, "IMAGE_REGISTRY: ghcr.io/${{ github.repository_owner }}") {
		t.Fatal("the release workflow's IMAGE_REGISTRY is not ghcr.io/<owner>; update docs/install.md and this test")
	}
	wantImage := makeVar(t, makefile, "IMAGE_REGISTRY") + "/macvirt-catalog:v" + makeVar(t, makefile, "VERSION")
	var catalogs, subs []map[string]any
	for _, obj := range yamlBlocks(t, read(t, "docs/install.md")) {
		switch obj["kind"] {
		case "CatalogSource":
			catalogs = append(catalogs, obj)
		case "Subscription":
			subs = append(subs, obj)
		}
	}
	if len(catalogs) != 1 || len(subs) != 1 {
		t.Fatalf("docs/install.md has %d CatalogSources and %d Subscriptions, want one of each", len(catalogs), len(subs))
	}
	cs, sub := catalogs[0], subs[0]
	if got := field(cs, "spec", "image"); got != wantImage {
		t.Errorf("the CatalogSource serves %q, want the release's catalog %q", got, wantImage)
	}
	if got := field(cs, "spec", "sourceType"); got != "grpc" {
		t.Errorf("the CatalogSource's sourceType is %q, want grpc (an image)", got)
	}
	for _, c := range []struct{ what, got, want string }{
		{"spec.source", field(sub, "spec", "source"), field(cs, "metadata", "name")},
		{"spec.sourceNamespace", field(sub, "spec", "sourceNamespace"), field(cs, "metadata", "namespace")},
		{"spec.name", field(sub, "spec", "name"), makeVar(t, makefile, "BUNDLE_PACKAGE")},
		{"spec.channel", field(sub, "spec", "channel"), makeVar(t, makefile, "BUNDLE_DEFAULT_CHANNEL")},
	} {
		if c.got != c.want {
			t.Errorf("the Subscription's %s is %q, want %q", c.what, c.got, c.want)
		}
	}
}

// TestInstallDocsNameWhatTheRepositoryHas: every make target, repository
// path and ClusterRole the install pages name exists.
func TestInstallDocsNameWhatTheRepositoryHas(t *testing.T) {
	root := cluster.RepoRoot()
	makefile := read(t, "Makefile")
	version := makeVar(t, makefile, "VERSION")
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(makefile, -1) {
		targets[m[1]] = true
	}
	roles := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(root, "config", "rbac"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(read(t, filepath.Join("config", "rbac", e.Name()))), &role); err == nil && role.Kind == "ClusterRole" {
			roles["macvirt-"+role.Name] = true
		}
	}
	if len(targets) == 0 || len(roles) == 0 {
		t.Fatalf("found %d make targets and %d ClusterRoles", len(targets), len(roles))
	}
	for _, page := range installDocs {
		doc := read(t, page)
		// make as a command: in backticks, or at the start of a code line.
		for _, m := range regexp.MustCompile("(?m)(?:`|^\\s*(?:\\$ )?)make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(doc, -1) {
			if !targets[m[1]] {
				t.Errorf("%s runs make %s, which the Makefile does not have", page, m[1])
			}
		}
		for _, m := range regexp.MustCompile("`((?:config|dist|docs|hack|test|cmd|bundle)/[^` ?]*)").FindAllStringSubmatch(doc, -1) {
			path := strings.TrimRight(m[1], ".,:;)")
			if _, err := os.Stat(filepath.Join(root, path)); err != nil {
				t.Errorf("%s names %s, which the repository does not have", page, path)
			}
		}
		for _, m := range regexp.MustCompile(`macvirt/macvirt/(config/[a-z-]+)\?ref=v([0-9][^'"\s]*)`).FindAllStringSubmatch(doc, -1) {
			if m[2] != version {
				t.Errorf("%s installs %s from release v%s, but this is v%s", page, m[1], m[2], version)
			}
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s installs %s, which the repository does not have", page, m[1])
			}
		}
		for _, m := range regexp.MustCompile(`--clusterrole[= ](macvirt-[a-z-]+)`).FindAllStringSubmatch(doc, -1) {
			if !roles[m[1]] {
				t.Errorf("%s binds ClusterRole %s, which config/rbac does not ship", page, m[1])
			}
		}
	}
}

// built is what kustomize builds in dir, by kind, namespace and name.
func built(t *testing.T, dir string) map[string]string {
	t.Helper()
	out, err := cluster.KustomizeBuild(dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	objs := map[string]string{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		objs[fmt.Sprintf("%v %s/%s", obj["kind"], field(obj, "metadata", "namespace"), field(obj, "metadata", "name"))] = string(b)
	}
	return objs
}

// TestOptionalIsConfigDefaultsTwoOptions: config/optional builds exactly
// what config/default gains with its network-policy and prometheus options
// uncommented, and the overlay docs/install.md shows for remote installs
// (its bases read from this checkout) builds the whole of that.
func TestOptionalIsConfigDefaultsTwoOptions(t *testing.T) {
	root := cluster.RepoRoot()
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, "config"), os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(tmp, "config", "default", "kustomization.yaml")
	k := read(t, "config/default/kustomization.yaml")
	for _, line := range []string{"- ../network-policy", "components:", "- ../prometheus"} {
		if !strings.Contains(k, "\n#"+line+"\n") {
			t.Fatalf("config/default/kustomization.yaml has no %q line to uncomment", "#"+line)
		}
		k = strings.Replace(k, "\n#"+line+"\n", "\n"+line+"\n", 1)
	}
	if err := os.WriteFile(file, []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	plain, full := built(t, filepath.Join(root, "config", "default")), built(t, filepath.Join(tmp, "config", "default"))
	optional := built(t, filepath.Join(root, "config", "optional"))
	for key, obj := range full {
		if p, ok := plain[key]; ok {
			if p != obj {
				t.Errorf("the options change %s", key)
			}
			continue
		}
		if o, ok := optional[key]; !ok {
			t.Errorf("config/optional lacks %s, which the options add", key)
		} else if o != obj {
			t.Errorf("config/optional's %s differs from the options':\n%s\nwant:\n%s", key, o, obj)
		}
	}
	for key := range optional {
		if _, ok := full[key]; !ok || plain[key] != "" {
			t.Errorf("config/optional builds %s, which the options do not add", key)
		}
	}
	if len(optional) == 0 {
		t.Fatal("config/optional builds nothing")
	}

	var overlay string
	for _, m := range regexp.MustCompile("(?s)```yaml\\n(.*?)```").FindAllStringSubmatch(read(t, "docs/install.md"), -1) {
		if strings.Contains(m[1], "kind: Kustomization") && strings.Contains(m[1], "config/optional?ref=") {
			overlay = m[1]
		}
	}
	if overlay == "" {
		t.Fatal("docs/install.md shows no Kustomization with config/optional")
	}
	dir := filepath.Join(tmp, "overlay")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	local, err := filepath.Rel(dir, root)
	if err != nil {
		t.Fatal(err)
	}
	overlay = regexp.MustCompile(`https://github\.com/macvirt/macvirt/(config/[a-z-]+)\?ref=\S+`).ReplaceAllString(overlay, filepath.ToSlash(local)+"/$1")
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	got := built(t, dir)
	for key, obj := range full {
		if got[key] != obj {
			t.Errorf("the documented overlay builds %s differently from config/default with its options, or not at all", key)
		}
	}
	if len(got) != len(full) {
		t.Errorf("the documented overlay builds %d objects, config/default with its options %d", len(got), len(full))
	}
	t.Logf("config/default: %d objects; with its options: %d; config/optional: %d", len(plain), len(full), len(optional))
}

// TestNoAgeColumnForAFutureTime: kubectl prints a date column as the time
// since it, and a time to come as <invalid>; a claim's expiry is printed as
// the timestamp it is.
func TestNoAgeColumnForAFutureTime(t *testing.T) {
	var crd struct {
		Spec struct {
			Versions []struct {
				Columns []struct {
					Name     string `json:"name"`
					Type     string `json:"type"`
					JSONPath string `json:"jsonPath"`
				} `json:"additionalPrinterColumns"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "config/crd/bases/macvirt.io_macclaims.yaml")), &crd); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range crd.Spec.Versions {
		for _, c := range v.Columns {
			if c.JSONPath == ".status.expiresAt" {
				found = true
				if c.Type != "string" {
					t.Errorf("column %s (%s) has type %s; kubectl would print <invalid> for a time to come", c.Name, c.JSONPath, c.Type)
				}
			}
		}
	}
	if !found {
		t.Error("MacClaim has no column for .status.expiresAt")
	}
}
