package operator

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/metrics"
	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/guestendpoint"
	"github.com/macvirt/macvirt/internal/tunnel"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// targetLabels are the labels the Prometheus Operator gives every series
// it scrapes through a ServiceMonitor (from the target's Service, Pod and
// endpoint, and Prometheus's own job and instance). Without honorLabels, a
// series label of one of these names is renamed exported_<name>.
var targetLabels = []string{"namespace", "pod", "service", "endpoint", "container", "job", "instance"}

// operatorCollectors is every collector of a macvirt_ metric the operator's
// process registers.
func operatorCollectors(t *testing.T) []prometheus.Collector {
	t.Helper()
	s := runtime.NewScheme()
	if err := macvirtv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cs := metrics.Collectors(fake.NewClientBuilder().WithScheme(s).Build())
	cs = append(cs, guestendpoint.Collectors()...)
	cs = append(cs, install.Collectors()...)
	cs = append(cs, tunnel.Collectors()...)
	return append(cs, monitoringObjectsReady)
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// described is each metric's name and sorted label names, from the
// collectors' own descriptions.
func described(t *testing.T, cs []prometheus.Collector) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the description %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// TestEveryMetricIsDocumented holds docs/metrics.md to the metrics the
// operator registers: every one is in its table with exactly its labels,
// and the table names no other. It also checks that the operator's
// registry holds them, so a metric registered elsewhere shows too.
func TestEveryMetricIsDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(macvirt_[a-z_]+)` \\| (gauge|counter|histogram) \\|([^|]*)\\|")
	documented := map[string][]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		documented[m[1]] = labels
	}
	have := described(t, operatorCollectors(t))
	for name, labels := range have {
		doc, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s%v is not in docs/metrics.md", name, labels)
		case !slices.Equal(doc, labels):
			t.Errorf("docs/metrics.md gives %s the labels %v; it has %v", name, doc, labels)
		}
	}
	for name := range documented {
		if _, ok := have[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which the operator does not export", name)
		}
	}
	// Whatever registered itself with the manager's registry (at init, or
	// by RegisterMetrics) is among them.
	if err := metrics.Register(fake.NewClientBuilder().Build()); err != nil {
		t.Fatal(err)
	}
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if name := f.GetName(); strings.HasPrefix(name, "macvirt_") {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if _, ok := have[base]; !ok {
				t.Errorf("the registry serves %s, which operatorCollectors does not list", name)
			}
		}
	}
}

// No operator metric has a label that Prometheus would rename because the
// scrape target has one of that name, unless the ServiceMonitor honours
// the series' labels.
func TestNoMetricLabelClashesWithTheScrapeTargets(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", "prometheus", "monitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var monitor struct {
		Spec struct {
			Endpoints []struct {
				HonorLabels bool `json:"honorLabels"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &monitor); err != nil {
		t.Fatal(err)
	}
	if len(monitor.Spec.Endpoints) == 0 {
		t.Fatal("the ServiceMonitor has no endpoints")
	}
	for _, e := range monitor.Spec.Endpoints {
		if e.HonorLabels {
			t.Fatal("the ServiceMonitor honours labels: a series could then overwrite where it came from; this test assumes it does not")
		}
	}
	for name, labels := range described(t, operatorCollectors(t)) {
		for _, l := range labels {
			if slices.Contains(targetLabels, l) {
				t.Errorf("%s has the label %q, which Prometheus renames exported_%s: every scraped series has the target's own", name, l, l)
			}
		}
	}
}

// TestTheDashboardQueriesOnlyExportedMetrics holds the Grafana dashboard to
// the metrics the operator exports: every panel queries, and every metric a
// query names is one of them (a histogram by its _bucket, _sum or _count).
func TestTheDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	panels, err := cluster.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	have := described(t, operatorCollectors(t))
	name := regexp.MustCompile(`macvirt_[a-z_]+`)
	used := map[string]bool{}
	for _, p := range panels {
		if len(p.Queries) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, expr := range p.Queries {
			names := name.FindAllString(expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q queries no macvirt metric", p.Title, expr)
			}
			for _, n := range names {
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if _, ok := have[strings.TrimSuffix(n, suffix)]; ok && strings.HasSuffix(n, suffix) {
						base = strings.TrimSuffix(n, suffix)
					}
				}
				if _, ok := have[base]; !ok {
					t.Errorf("panel %q queries %s, which the operator does not export", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	t.Logf("%d panels query %d of the operator's %d metrics", len(panels), len(used), len(have))
}
