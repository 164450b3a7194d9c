package helmcheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

const root = "../.."

var chartDir = filepath.Join(root, "dist", "chart")

func render(t *testing.T, release, namespace string, set map[string]any) []map[string]any {
	t.Helper()
	objs, err := Render(chartDir, release, namespace, set)
	if err != nil {
		t.Fatalf("%v (run make helm-chart)", err)
	}
	return objs
}

// kustomize builds config/default with the Makefile's kustomize.
func kustomize(t *testing.T) []map[string]any {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "bin", "kustomize"), "build", filepath.Join(root, "config", "default")) //nolint:gosec // the repository's own kustomize.
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build config/default (make kustomize installs it): %v\n%s", err, stderr.String())
	}
	objs, err := Decode("config/default", out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// normalize drops what differs only in form between the two installs:
// the chart's own labels (helm.sh/chart, app.kubernetes.io/instance, and
// managed-by Helm where kustomize says kustomize), the order of the
// manager's flags, an explicit imagePullPolicy IfNotPresent (Kubernetes'
// default for a tagged image), and the chart's keep policy on CRDs (helm
// uninstall leaves them, and so every Mac, in place).
func normalize(obj map[string]any) map[string]any {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if labels, ok := v["labels"].(map[string]any); ok {
				delete(labels, "helm.sh/chart")
				delete(labels, "app.kubernetes.io/instance")
				if labels["app.kubernetes.io/managed-by"] == "Helm" || labels["app.kubernetes.io/managed-by"] == "kustomize" {
					delete(labels, "app.kubernetes.io/managed-by")
				}
				if len(labels) == 0 {
					delete(v, "labels")
				}
			}
			if image, ok := v["image"].(string); ok && v["imagePullPolicy"] == "IfNotPresent" && !strings.HasSuffix(image, ":latest") {
				delete(v, "imagePullPolicy")
			}
			if args, ok := v["args"].([]any); ok {
				slices.SortFunc(args, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(obj)
	if obj["kind"] == "CustomResourceDefinition" {
		if meta, _ := obj["metadata"].(map[string]any); meta != nil {
			if a, _ := meta["annotations"].(map[string]any); a["helm.sh/resource-policy"] == "keep" {
				delete(a, "helm.sh/resource-policy")
			}
		}
	}
	return obj
}

func index(objs []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		out[Key(o)] = normalize(o)
	}
	return out
}

// TestChartIsTheKustomizeInstall: the chart, with its optional RBAC helpers
// on, installs the same objects as config/default, field for field but
// for the differences in form normalize lists; Helm creates the namespace.
// By default it leaves out only the per-kind admin, editor and viewer
// roles.
func TestChartIsTheKustomizeInstall(t *testing.T) {
	want := index(kustomize(t))
	got := index(render(t, "macvirt", "macvirt-system", HelpersOn))
	var problems []string
	for k, w := range want {
		if w["kind"] == "Namespace" {
			continue
		}
		g, ok := got[k]
		if !ok {
			problems = append(problems, "the chart lacks "+k)
			continue
		}
		if d := diff("", w, g); len(d) > 0 {
			problems = append(problems, fmt.Sprintf("%s differs:\n  %s", k, strings.Join(d, "\n  ")))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, "the chart adds "+k)
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("%d differences between dist/chart and config/default:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	t.Logf("%d objects in config/default, %d rendered by the chart", len(want), len(got))

	defaults := index(render(t, "macvirt", "macvirt-system", nil))
	helpers := 0
	for k := range got {
		if _, ok := defaults[k]; !ok {
			if !strings.HasPrefix(k, "ClusterRole /macvirt-mac") || !(strings.HasSuffix(k, "-admin-role") || strings.HasSuffix(k, "-editor-role") || strings.HasSuffix(k, "-viewer-role")) {
				t.Errorf("by default the chart leaves out %s", k)
			}
			helpers++
		}
	}
	t.Logf("by default the chart leaves out %d per-kind helper roles", helpers)
}

// TestChartHoldsTogetherUnderAnotherReleaseAndNamespace renders the chart
// as release "ops-macs" in namespace "platform" and checks that what refers
// to an object of the chart finds it there: bindings their roles and
// subjects, certificates their issuers, the webhooks and the
// ServiceMonitor their Services, the Deployment its ServiceAccount.
func TestChartHoldsTogetherUnderAnotherReleaseAndNamespace(t *testing.T) {
	objs := render(t, "ops-macs", "platform", map[string]any{"rbac": map[string]any{"helpers": map[string]any{"enabled": true}},
		"prometheus": map[string]any{"enabled": true}})
	have := map[string]bool{}
	for _, o := range objs {
		have[Key(o)] = true
	}
	var missing []string
	need := func(from, kind, ns, name string) {
		if k := fmt.Sprintf("%s %s/%s", kind, ns, name); !have[k] {
			missing = append(missing, fmt.Sprintf("%s refers to %s, which the chart does not render", from, k))
		}
	}
	for _, o := range objs {
		from := Key(o)
		meta, _ := o["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		// The objects outside the release's namespace: the operator's Role
		// and RoleBinding that read the API server's front-proxy trust (for
		// the tunnel's APIService), beside it in kube-system.
		trustReader := (o["kind"] == "Role" || o["kind"] == "RoleBinding") && ns == "kube-system" &&
			meta["name"] == "macvirt-front-proxy-trust-reader"
		if ns != "" && ns != "platform" && !trustReader {
			missing = append(missing, from+" is not in the release's namespace")
		}
		str := func(path ...string) string {
			var v any = o
			for _, p := range path {
				m, _ := v.(map[string]any)
				v = m[p]
			}
			s, _ := v.(string)
			return s
		}
		switch o["kind"] {
		case "RoleBinding", "ClusterRoleBinding":
			roleNS := ""
			if str("roleRef", "kind") == "Role" {
				roleNS = ns
			}
			need(from, str("roleRef", "kind"), roleNS, str("roleRef", "name"))
			subjects, _ := o["subjects"].([]any)
			for _, s := range subjects {
				if m, _ := s.(map[string]any); m["kind"] == "ServiceAccount" {
					need(from, "ServiceAccount", fmt.Sprint(m["namespace"]), fmt.Sprint(m["name"]))
				}
			}
		case "Certificate":
			need(from, str("spec", "issuerRef", "kind"), ns, str("spec", "issuerRef", "name"))
		case "Issuer":
			if secret := str("spec", "ca", "secretName"); secret != "" {
				found := false
				for _, c := range objs {
					if c["kind"] == "Certificate" && fmt.Sprint(c["spec"].(map[string]any)["secretName"]) == secret {
						found = true
					}
				}
				if !found {
					missing = append(missing, fmt.Sprintf("%s signs with Secret %s, which no Certificate of the chart writes", from, secret))
				}
			}
		case "Deployment":
			need(from, "ServiceAccount", ns, str("spec", "template", "spec", "serviceAccountName"))
		case "APIService":
			need(from, "Service", str("spec", "service", "namespace"), str("spec", "service", "name"))
			if inject := meta["annotations"].(map[string]any)["cert-manager.io/inject-ca-from"]; inject != nil {
				parts := strings.SplitN(fmt.Sprint(inject), "/", 2)
				need(from, "Certificate", parts[0], parts[len(parts)-1])
			} else {
				missing = append(missing, from+" has no cert-manager.io/inject-ca-from: the API server would not trust the tunnel")
			}
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			hooks, _ := o["webhooks"].([]any)
			for _, h := range hooks {
				m, _ := h.(map[string]any)
				svc, _ := m["clientConfig"].(map[string]any)["service"].(map[string]any)
				need(from, "Service", fmt.Sprint(svc["namespace"]), fmt.Sprint(svc["name"]))
			}
			if inject := meta["annotations"].(map[string]any)["cert-manager.io/inject-ca-from"]; inject != nil {
				parts := strings.SplitN(fmt.Sprint(inject), "/", 2)
				need(from, "Certificate", parts[0], parts[len(parts)-1])
			}
		}
	}
	// What the binary expects whatever the release: guests reach the agent
	// endpoint at the Service macvirt-agent (cmd/main.go's default
	// --agent-endpoint), whose name the serving certificate carries.
	need("the operator's default --agent-endpoint", "Service", "platform", "macvirt-agent")
	need("the APIService v1alpha1.subresources.macvirt.io (the tunnel)", "APIService", "", "v1alpha1.subresources.macvirt.io")
	for _, o := range objs {
		if o["kind"] != "Certificate" || !strings.HasSuffix(Key(o), "serving-cert") {
			continue
		}
		names, _ := o["spec"].(map[string]any)["dnsNames"].([]any)
		for _, want := range []string{"macvirt-agent.platform.svc", "macvirt-tunnel.platform.svc"} {
			if !slices.Contains(names, any(want)) {
				missing = append(missing, fmt.Sprintf("%s does not name %s: %v", Key(o), want, names))
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("rendered as ops-macs in platform:\n%s", strings.Join(missing, "\n"))
	}

	// The operator needs its ClusterRole: a namespaced install is refused,
	// saying why.
	if _, err := Render(chartDir, "ops-macs", "platform", map[string]any{"rbac": map[string]any{"namespaced": true}}); err == nil ||
		!strings.Contains(err.Error(), "rbac.namespaced is not supported") {
		t.Errorf("rbac.namespaced=true: %v, want a refusal naming rbac.namespaced", err)
	}
}

// diff lists the paths where want and got differ, with both values.
func diff(path string, want, got any) []string {
	wm, wok := want.(map[string]any)
	gm, gok := got.(map[string]any)
	if wok && gok {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			out = append(out, diff(path+"."+k, wm[k], gm[k])...)
		}
		return out
	}
	wl, wok := want.([]any)
	gl, gok := got.([]any)
	if wok && gok && len(wl) == len(gl) {
		var out []string
		for i := range wl {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), wl[i], gl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	short := func(v any) string {
		b, _ := yaml.Marshal(v)
		s := strings.TrimSpace(string(b))
		if len(s) > 300 {
			s = s[:300] + "..."
		}
		return strings.ReplaceAll(s, "\n", " | ")
	}
	return []string{fmt.Sprintf("%s: kustomize %s; chart %s", path, short(want), short(got))}
}

// TestChartVersionIsTheRelease: the chart's version and appVersion are the
// Makefile's VERSION, as the images' tags are.
func TestChartVersionIsTheRelease(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VERSION \?= (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no VERSION")
	}
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if chart.Metadata.Version != string(m[1]) || chart.Metadata.AppVersion != "v"+string(m[1]) {
		t.Errorf("dist/chart is version %s, appVersion %s; the Makefile's VERSION is %s (run make helm-chart)", chart.Metadata.Version, chart.Metadata.AppVersion, m[1])
	}
}
