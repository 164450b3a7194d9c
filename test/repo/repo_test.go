package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), name)) //nolint:gosec // fixed repository files.
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProjectFileListsEveryKind keeps PROJECT true, so `kubebuilder create`
// keeps working: one v1alpha1 resource per registered kind, with the right
// scope.
func TestProjectFileListsEveryKind(t *testing.T) {
	var project struct {
		Domain    string   `json:"domain"`
		Layout    []string `json:"layout"`
		Repo      string   `json:"repo"`
		Resources []struct {
			API struct {
				Namespaced bool `json:"namespaced"`
			} `json:"api"`
			Controller bool `json:"controller"`
			Webhooks   *struct {
				Defaulting     bool   `json:"defaulting"`
				Validation     bool   `json:"validation"`
				WebhookVersion string `json:"webhookVersion"`
			} `json:"webhooks"`
			Group   string `json:"group"`
			Kind    string `json:"kind"`
			Version string `json:"version"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "PROJECT")), &project); err != nil {
		t.Fatal(err)
	}
	if project.Domain != "io" || project.Repo != "github.com/macvirt/macvirt" || !slices.Contains(project.Layout, "go.kubebuilder.io/v4") {
		t.Errorf("PROJECT header = %+v", project)
	}
	namespaced := map[string]bool{"MacClass": false, "MacImage": false, "MacPool": false, "MacClaim": true, "MacMachine": true, "MacRunnerSet": true, "MacBuildkiteQueue": true, "MacHost": false}
	served := webhookNames(t)
	var kinds []string
	for _, r := range project.Resources {
		kinds = append(kinds, r.Kind)
		if r.Group+"."+project.Domain != macvirtv1alpha1.GroupVersion.Group || r.Version != macvirtv1alpha1.GroupVersion.Version {
			t.Errorf("%s is in %s.%s/%s, want %s", r.Kind, r.Group, project.Domain, r.Version, macvirtv1alpha1.GroupVersion)
		}
		if want, ok := namespaced[r.Kind]; !ok || want != r.API.Namespaced {
			t.Errorf("%s: namespaced=%v in PROJECT", r.Kind, r.API.Namespaced)
		}
		// One package per kind: MacClass's controller is internal/controller/class.
		controllerFile := filepath.Join(cluster.RepoRoot(), "internal", "controller", strings.TrimPrefix(strings.ToLower(r.Kind), "mac"), "controller.go")
		if _, err := os.Stat(controllerFile); (err == nil) != r.Controller {
			t.Errorf("%s: PROJECT says controller=%v, but %s exists=%v", r.Kind, r.Controller, controllerFile, err == nil)
		}
		kind := strings.ToLower(r.Kind)
		webhookFile := filepath.Join(cluster.RepoRoot(), "internal", "webhook", "v1alpha1", kind+"_webhook.go")
		_, err := os.Stat(webhookFile)
		if (err == nil) != (r.Webhooks != nil) {
			t.Errorf("%s: PROJECT lists webhooks=%v, but %s exists=%v", r.Kind, r.Webhooks != nil, webhookFile, err == nil)
		}
		if w := r.Webhooks; w != nil {
			if w.WebhookVersion != "v1" || w.Defaulting != served["m"+kind+"-v1alpha1.macvirt.io"] || w.Validation != served["v"+kind+"-v1alpha1.macvirt.io"] {
				t.Errorf("%s: PROJECT webhooks %+v differ from config/webhook/manifests.yaml", r.Kind, *w)
			}
		}
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"MacBuildkiteQueue", "MacClaim", "MacClass", "MacHost", "MacImage", "MacMachine", "MacPool", "MacRunnerSet"}) {
		t.Errorf("PROJECT kinds = %v", kinds)
	}
}

// TestReadmeQuickStartIsTwoCommands checks the first code block of the
// README's quick start.
func TestReadmeQuickStartIsTwoCommands(t *testing.T) {
	readme := read(t, "README.md")
	m := regexp.MustCompile("(?s)## Quick start\\s*```sh\\n(.*?)```").FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no '## Quick start' followed by a sh code block")
	}
	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(m[1]), "\n") {
		cmds = append(cmds, strings.TrimSpace(strings.SplitN(line, "#", 2)[0]))
	}
	if !slices.Equal(cmds, []string{"make sandbox", "make test"}) {
		t.Errorf("quick start commands = %q, want 'make sandbox' and 'make test'", cmds)
	}
}

// TestMakeHelpListsTheDocumentedTargets runs `make help`.
func TestMakeHelpListsTheDocumentedTargets(t *testing.T) {
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = cluster.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	out = regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAll(out, nil)
	for _, target := range []string{"help", "manifests", "generate", "fmt", "vet", "lint", "test", "verify-gen",
		"build", "run", "docker-build", "envtest", "crds", "sandbox", "build-agent"} {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(target) + `\s`).Match(out) {
			t.Errorf("make help does not list %q", target)
		}
	}
}

// webhookNames are the webhooks of the generated configurations.
func webhookNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, doc := range strings.Split(read(t, "config/webhook/manifests.yaml"), "\n---\n") {
		var cfg struct {
			Webhooks []struct {
				Name string `json:"name"`
			} `json:"webhooks"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		for _, w := range cfg.Webhooks {
			names[w.Name] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("config/webhook/manifests.yaml lists no webhook")
	}
	return names
}

// TestNoDocReplacesKubeVirtsFeatureGates keeps the docs from telling an
// admin to merge-patch KubeVirt's featureGates: a merge patch replaces the
// whole list and silently turns off every other gate the cluster had. Nor
// may they set HyperConverged's jsonpatch annotation to an array of their
// own: the annotation is one value, and that drops every patch it held.
func TestNoDocReplacesKubeVirtsFeatureGates(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(cluster.RepoRoot(), "README.md"))
	command := regexp.MustCompile(`kubectl(?:[^\n]*\\\n)*[^\n]*`)
	// An annotation such as kubevirt.kubevirt.io/jsonpatch given a literal
	// JSON array, quoted or not.
	jsonpatchArray := regexp.MustCompile(`/jsonpatch=['"]?\[`)
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // fixed repository files.
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range command.FindAllString(string(b), -1) {
			if strings.Contains(cmd, "featureGates") && (strings.Contains(cmd, "--type merge") || strings.Contains(cmd, "--type=merge")) {
				t.Errorf("%s: a merge patch of featureGates replaces every gate the cluster has; append with a JSON patch:\n%s",
					filepath.Base(f), cmd)
			}
			if jsonpatchArray.MatchString(cmd) {
				t.Errorf("%s: setting the jsonpatch annotation to an array replaces every patch it held; append to what it holds:\n%s",
					filepath.Base(f), cmd)
			}
		}
	}
}

// docs/tenancy.md's tables list every role config/rbac ships for people,
// with its resources and verbs as shipped, and no role that is not shipped.
func TestTenancyDocListsTheShippedRoles(t *testing.T) {
	doc := read(t, "docs/tenancy.md")
	rows := map[string]string{}
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`macvirt-") {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = line
	}
	dir := filepath.Join(cluster.RepoRoot(), "config", "rbac")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, "_role.yaml") || strings.HasPrefix(name, "leader_election") || strings.HasPrefix(name, "metrics_") {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(read(t, filepath.Join("config", "rbac", name))), &role); err != nil {
			t.Fatal(err)
		}
		installed := "macvirt-" + role.Name
		shipped[installed] = true
		row, ok := rows[installed]
		if !ok {
			t.Errorf("docs/tenancy.md does not list %s (%s)", installed, name)
			continue
		}
		for _, rule := range role.Rules {
			for _, r := range rule.Resources {
				if !strings.Contains(row, "`"+r+"`") && !strings.Contains(row, "`"+strings.TrimSuffix(r, "/status")+"` / `"+r+"`") {
					t.Errorf("docs/tenancy.md's row for %s does not name resource %s", installed, r)
				}
			}
			for _, v := range rule.Verbs {
				if !strings.Contains(row, v) {
					t.Errorf("docs/tenancy.md's row for %s does not list verb %s", installed, v)
				}
			}
		}
	}
	for name := range rows {
		if !shipped[name] {
			t.Errorf("docs/tenancy.md lists %s, which config/rbac does not ship", name)
		}
	}
}

// A tenant may not read the pools' namespace: the claim's columns say
// where its machine is (namespace/name, node, progress) from the claim's
// own status, and a machine's columns name its claim's namespace.
func TestPrinterColumnsShowNamespacesAndWhatATenantNeeds(t *testing.T) {
	columns := func(file string) map[string]string {
		var crd struct {
			Spec struct {
				Versions []struct {
					Columns []struct {
						Name     string `json:"name"`
						JSONPath string `json:"jsonPath"`
					} `json:"additionalPrinterColumns"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(read(t, filepath.Join("config", "crd", "bases", file))), &crd); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, v := range crd.Spec.Versions {
			for _, c := range v.Columns {
				out[c.Name] = c.JSONPath
			}
		}
		return out
	}
	claim := columns("macvirt.io_macclaims.yaml")
	for name, path := range map[string]string{"Machine": ".status.machine.name", "Node": ".status.machine.nodeName",
		"Progress": ".status.machine.progress", "Host": ".status.connection.host", "Address": ".status.connection.address"} {
		if claim[name] != path {
			t.Errorf("MacClaim column %s = %q, want %s", name, claim[name], path)
		}
	}
	machine := columns("macvirt.io_macmachines.yaml")
	for name, path := range map[string]string{"Claim NS": ".spec.claimRef.namespace", "Claim": ".spec.claimRef.name"} {
		if machine[name] != path {
			t.Errorf("MacMachine column %s = %q, want %s", name, machine[name], path)
		}
	}
}
