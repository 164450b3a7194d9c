package helmcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

func prometheusRule(objs []map[string]any) map[string]any {
	for _, o := range objs {
		if o["kind"] == "PrometheusRule" {
			return o
		}
	}
	return nil
}

// TestChartInstallsTheAlertsWithPrometheus: with prometheus.enabled the
// chart installs config/prometheus's alerts as they are, rule for rule
// (Helm leaves their {{ $value }} alone), in the release's namespace;
// without it, none.
func TestChartInstallsTheAlertsWithPrometheus(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if r := prometheusRule(render(t, "macvirt", "macvirt-system", nil)); r != nil {
		t.Error("without prometheus.enabled the chart installs a PrometheusRule")
	}
	got := prometheusRule(render(t, "ops-macs", "platform", map[string]any{"prometheus": map[string]any{"enabled": true,
		"labels": map[string]any{"release": "kube-prometheus-stack"}}}))
	if got == nil {
		t.Fatal("with prometheus.enabled the chart installs no PrometheusRule (run make helm-chart)")
	}
	meta, _ := got["metadata"].(map[string]any)
	if labels, _ := meta["labels"].(map[string]any); labels["release"] != "kube-prometheus-stack" {
		t.Errorf("the PrometheusRule's labels %v lack prometheus.labels (release: kube-prometheus-stack), by which a Prometheus selects rules", labels)
	}
	if meta["namespace"] != "platform" || meta["name"] != "macvirt-alerts" {
		t.Errorf("the PrometheusRule is %v/%v, want platform/macvirt-alerts", meta["namespace"], meta["name"])
	}
	if d := diff("spec", want["spec"], got["spec"]); len(d) > 0 {
		t.Errorf("the chart's alerts differ from config/prometheus/rules.yaml:\n  %s", strings.Join(d, "\n  "))
	}
	if !strings.Contains(string(raw), "{{ $value }}") {
		t.Fatal("config/prometheus/rules.yaml has no {{ $value }}: this test no longer proves the chart keeps one")
	}
}

// TestNotesSayWhatMacvirtNeeds renders what helm install prints.
func TestNotesSayWhatMacvirtNeeds(t *testing.T) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, prometheus := range []bool{false, true} {
		vals, err := chartutil.ToRenderValues(chart, map[string]any{"prometheus": map[string]any{"enabled": prometheus}},
			chartutil.ReleaseOptions{Name: "ops-macs", Namespace: "platform", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Render(chart, vals)
		if err != nil {
			t.Fatal(err)
		}
		notes := files["macvirt/templates/NOTES.txt"]
		for _, want := range []string{
			"installed in namespace platform",
			"deploy/macvirt-controller-manager",
			"Plugins feature gate",
			"macvirt.io/apple-hardware=true:NoSchedule",
			"macvirt-claim-editor",
			"/docs/install.md",
		} {
			if !strings.Contains(notes, want) {
				t.Errorf("NOTES.txt (prometheus.enabled=%v) does not say %q:\n%s", prometheus, want, notes)
			}
		}
		if said := strings.Contains(notes, "--set prometheus.enabled=true"); said == prometheus {
			t.Errorf("NOTES.txt with prometheus.enabled=%v: suggesting to turn it on is %v", prometheus, said)
		}
	}
}
