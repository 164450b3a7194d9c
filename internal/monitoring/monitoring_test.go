package monitoring

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// TestTheCopiesAreConfigPrometheus: what the operator writes is what
// kustomize users apply.
func TestTheCopiesAreConfigPrometheus(t *testing.T) {
	for name, embedded := range map[string][]byte{"monitor.yaml": monitorYAML, "rules.yaml": rulesYAML} {
		want, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "prometheus", name)) //nolint:gosec // a repository file.
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(embedded, want) {
			t.Errorf("internal/monitoring/%s differs from config/prometheus/%s: run make manifests", name, name)
		}
	}
}

func TestObjects(t *testing.T) {
	objs, err := Objects("operators")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range objs {
		got[o.GetKind()] = o.GetNamespace() + "/" + o.GetName()
		if o.GetLabels()["app.kubernetes.io/managed-by"] != "macvirt-operator" {
			t.Errorf("%s %s is not labelled as the operator's", o.GetKind(), o.GetName())
		}
	}
	want := map[string]string{"ServiceMonitor": "operators/macvirt-controller-manager-metrics-monitor", "PrometheusRule": "operators/macvirt-alerts"}
	if len(got) != len(want) || got["ServiceMonitor"] != want["ServiceMonitor"] || got["PrometheusRule"] != want["PrometheusRule"] {
		t.Errorf("objects %v, want %v", got, want)
	}
}
