// Package alerts tests the operator's Prometheus alerts with promtool: the
// rules of config/prometheus/rules.yaml must load, each must have a runbook,
// and promtool's rule tests (testdata/alerts.yaml) must pass.
package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// promtool finds promtool: a failure in CI (.ci/run installs it with the
// prometheus package), a skip elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found; install the prometheus package")
		}
		t.Skip("promtool not found; install the prometheus package to run the alert tests")
	}
	return path
}

// rules writes the PrometheusRule's groups as a Prometheus rule file into
// dir and returns the rule as read.
func rules(t *testing.T, dir string) prometheusRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule prometheusRule
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	var full map[string]any
	if err := yaml.Unmarshal(raw, &full); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(full["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	return rule
}

func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	rule := rules(t, dir)
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), tests, 0o600); err != nil { //nolint:gosec // a temp dir of this test.
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts.yaml"}} {
		cmd := exec.Command(bin, args...) //nolint:gosec // promtool, on files of this test.
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}
	// Every alert is tested, and has its runbook.
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool test in testdata/alerts.yaml", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			const prefix = "https://github.com/macvirt/macvirt/blob/main/"
			if !strings.HasPrefix(url, prefix) {
				t.Errorf("alert %s: runbook_url %q is not a page of the repository", r.Alert, url)
				continue
			}
			if _, err := os.Stat(filepath.Join(cluster.RepoRoot(), strings.TrimPrefix(url, prefix))); err != nil {
				t.Errorf("alert %s: its runbook: %v", r.Alert, err)
			}
		}
	}
}

// Every query of the Grafana dashboard is valid PromQL: promtool checks
// each as a recording rule (Grafana's $__rate_interval read as 5m).
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	panels, err := cluster.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	var recording []map[string]string
	for i, p := range panels {
		for j, expr := range p.Queries {
			recording = append(recording, map[string]string{"record": fmt.Sprintf("dashboard:panel%d_query%d", i, j),
				"expr": strings.ReplaceAll(expr, "$__rate_interval", "5m")})
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recording}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "check", "rules", "dashboard.yaml") //nolint:gosec // promtool, on a file of this test.
	cmd.Dir = dir
	res, err := cmd.CombinedOutput()
	t.Logf("promtool check rules (%d dashboard queries):\n%s", len(recording), res)
	if err != nil {
		t.Fatalf("promtool check rules: %v", err)
	}
}
