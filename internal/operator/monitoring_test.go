package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// monitoringCRD stands in for one of the Prometheus Operator's CRDs: the
// kind is served, its schema is not checked here.
func monitoringCRD(plural, kind string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
}

// TestMonitoringObjectsAgainstAnAPIServer: nothing is written while the
// cluster lacks the Prometheus Operator's kinds; once it has them, a
// refusal shows in the API server's words and in the gauge, and then the
// objects are written, and written back after an edit.
func TestMonitoringObjectsAgainstAnAPIServer(t *testing.T) {
	cluster.NeedsAPIServer(t)
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	env := cluster.New(s)
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(cluster.MissingBinariesHint(err))
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts, err := cluster.DynamicClientOptions(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, *opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &MonitoringObjects{Client: c, Mapper: opts.Mapper, Namespace: "monitoring-test", Log: logr.Discard()}
	rule := &unstructured.Unstructured{}
	rule.SetAPIVersion("monitoring.coreos.com/v1")
	rule.SetKind("PrometheusRule")
	ruleKey := client.ObjectKey{Namespace: "monitoring-test", Name: "macvirt-alerts"}

	// No Prometheus Operator: nothing to do, and no error.
	if err := m.Ensure(ctx); err != nil {
		t.Fatalf("without the Prometheus Operator's kinds: %v", err)
	}
	if n := testutil.CollectAndCount(monitoringObjectsReady); n != 0 {
		t.Errorf("%d series of macvirt_monitoring_objects_ready without the kinds, want none", n)
	}

	// The kinds appear; the namespace does not exist yet.
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		monitoringCRD("servicemonitors", "ServiceMonitor"), monitoringCRD("prometheusrules", "PrometheusRule")}}); err != nil {
		t.Fatal(err)
	}
	err = m.Ensure(ctx)
	if err == nil || !strings.Contains(err.Error(), `namespaces "monitoring-test" not found`) {
		t.Fatalf("into a missing namespace: %v, want the API server's refusal", err)
	}
	if v := testutil.ToFloat64(monitoringObjectsReady.WithLabelValues("PrometheusRule")); v != 0 {
		t.Errorf("macvirt_monitoring_objects_ready{kind=PrometheusRule} is %v after a refusal, want 0", v)
	}

	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring-test"}}); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		if v := testutil.ToFloat64(monitoringObjectsReady.WithLabelValues(kind)); v != 1 {
			t.Errorf("macvirt_monitoring_objects_ready{kind=%s} is %v once written, want 1", kind, v)
		}
	}
	if err := c.Get(ctx, ruleKey, rule); err != nil {
		t.Fatal(err)
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if len(groups) == 0 {
		t.Fatal("the PrometheusRule has no rule groups")
	}

	// Someone empties the rules; the next pass writes them back.
	if err := unstructured.SetNestedSlice(rule.Object, []any{}, "spec", "groups"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, rule); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, ruleKey, rule); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups"); len(again) != len(groups) {
		t.Errorf("after an edit the PrometheusRule has %d groups, want %d back", len(again), len(groups))
	}
}
