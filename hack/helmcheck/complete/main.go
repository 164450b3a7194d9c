// Command complete adds to a chart made by Kubebuilder's helm/v2-alpha
// plugin each object of the kustomize output the plugin left out, as a
// template of templates/extras (`make helm-chart` runs it). The plugin
// (v4.16) keeps one cert-manager Issuer only, and names files by object
// name alone, so a Role and a ClusterRole of one name become one file:
// macvirt's CA issuer and its namespaced manager Role would be lost.
//
// The kustomize output holds config/network-policy's NetworkPolicies
// (config/default's network-policy option, turned on for the chart only),
// so the plugin templates the chart's policies from them rather than
// writing its own, which let in the webhooks but not the agent endpoint.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/macvirt/macvirt/hack/helmcheck"
)

func main() {
	chart := flag.String("chart", "", "The chart directory.")
	manifests := flag.String("manifests", "", "The kustomize output the chart was made from.")
	namespace := flag.String("namespace", "macvirt-system", "The namespace of the kustomize output.")
	prefix := flag.String("prefix", "macvirt-", "The name prefix of the kustomize output.")
	name := flag.String("name", "macvirt", "The chart's name (of its helper templates).")
	flag.Parse()
	if err := run(*chart, *manifests, *namespace, *prefix, *name); err != nil {
		fmt.Fprintln(os.Stderr, "complete:", err)
		os.Exit(1)
	}
}

func run(chart, manifests, namespace, prefix, name string) error {
	raw, err := os.ReadFile(manifests) //nolint:gosec // the build's own file.
	if err != nil {
		return err
	}
	want, err := helmcheck.Decode(manifests, raw)
	if err != nil {
		return err
	}
	// The NetworkPolicies render only with networkPolicy.enabled, the
	// ServiceMonitor and the alerts only with prometheus.enabled.
	got, err := helmcheck.Render(chart, strings.TrimSuffix(prefix, "-"), namespace, map[string]any{
		"rbac":          helmcheck.HelpersOn["rbac"],
		"networkPolicy": map[string]any{"enabled": true},
		"prometheus":    map[string]any{"enabled": true},
	})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, o := range got {
		have[helmcheck.Key(o)] = true
	}
	for _, o := range want {
		// Helm creates the release's namespace (--create-namespace).
		if o["kind"] == "Namespace" || have[helmcheck.Key(o)] {
			continue
		}
		key := helmcheck.Key(o)
		// An extras template is rendered whatever the values say; a policy
		// there could not be turned off with networkPolicy.enabled.
		if o["kind"] == "NetworkPolicy" {
			return fmt.Errorf("the plugin left out %s; it must template it under networkPolicy.enabled", key)
		}
		meta, _ := o["metadata"].(map[string]any)
		objName, _ := meta["name"].(string)
		s, err := helmcheck.Template(o, name, namespace, prefix)
		if err != nil {
			return err
		}
		file := filepath.Join(chart, "templates", "extras", strings.ToLower(fmt.Sprint(o["kind"]))+"-"+strings.TrimPrefix(objName, prefix)+".yaml")
		if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil { //nolint:gosec // a chart file, world-readable.
			return err
		}
		fmt.Printf("complete: %s was left out by the plugin; added %s\n", key, file)
	}
	return settle(chart, name)
}

// settle fixes what the chart must hold for macvirt's operator whatever the
// release is called: the operator and its certificate name the agent
// Service macvirt-agent (cmd/main.go's --agent-endpoint default), so every
// name is the chart's own (fullnameOverride), and it needs cluster-wide
// RBAC, so rbac.namespaced is refused with a message that says so. The
// plugin turns networkPolicy and prometheus on by default when the
// kustomize output has policies and a ServiceMonitor; config/default
// leaves them off, and so does the chart.
func settle(chart, name string) error {
	values := filepath.Join(chart, "values.yaml")
	b, err := os.ReadFile(values) //nolint:gosec // the chart's own file.
	if err != nil {
		return err
	}
	const commented = "# fullnameOverride: \"\""
	if !strings.Contains(string(b), commented) {
		return fmt.Errorf("%s has no %q line to set", values, commented)
	}
	b = []byte(strings.Replace(string(b), commented,
		"## macvirt's names do not depend on the release's: the operator reaches its\n"+
			"## agent endpoint as the Service "+name+"-agent.\n"+
			"fullnameOverride: "+name, 1))
	const networkPolicyOn = "networkPolicy:\n  enabled: true\n"
	if !strings.Contains(string(b), networkPolicyOn) {
		return fmt.Errorf("%s has no %q to turn off", values, networkPolicyOn)
	}
	b = []byte(strings.Replace(string(b), networkPolicyOn,
		"## config/network-policy's policies; off by default, as in config/default.\n"+
			"## On, the manager's pod admits its metrics port (from namespaces labelled\n"+
			"## metrics: enabled), its webhooks and its guest-agent endpoint.\n"+
			"networkPolicy:\n  enabled: false\n", 1))
	// The plugin turns prometheus on by default when the kustomize output
	// has a ServiceMonitor (the chart is made with config/prometheus in);
	// config/default leaves it off, and so does the chart.
	const prometheusOn = "prometheus:\n  enabled: true\n"
	if !strings.Contains(string(b), prometheusOn) {
		return fmt.Errorf("%s has no %q to turn off", values, prometheusOn)
	}
	b = []byte(strings.Replace(string(b), prometheusOn, "prometheus:\n  enabled: false\n", 1))
	if err := os.WriteFile(values, b, 0o644); err != nil { //nolint:gosec // a chart file, world-readable.
		return err
	}
	if err := gatePrometheusRules(chart); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(chart, "templates", "NOTES.txt"), []byte(notes), 0o644); err != nil {
		return err
	}
	checks := filepath.Join(chart, "templates", "extras", "checks.yaml")
	if err := os.MkdirAll(filepath.Dir(checks), 0o750); err != nil {
		return err
	}
	return os.WriteFile(checks, []byte(`{{- if .Values.rbac.namespaced }}
{{- fail "rbac.namespaced is not supported: `+name+`'s operator watches nodes and VirtualMachines in every namespace and needs its ClusterRole; leave rbac.namespaced false" }}
{{- end }}
`), 0o644) //nolint:gosec // a chart file, world-readable.
}

// notes is what helm install prints: what macvirt needs before a Mac can
// run, and where each step is documented.
const notes = `macvirt {{ .Chart.AppVersion }} is installed in namespace {{ .Release.Namespace }}.

Check that the operator runs:

  kubectl -n {{ .Release.Namespace }} rollout status deploy/{{ include "macvirt.resourceName" (dict "suffix" "controller-manager" "context" $) }}

Before a Mac can run (docs/install.md, "Prerequisites"):

  1. KubeVirt with its Plugins feature gate (1.9 or later; before 1.9 the
     Sidecar gate), and CDI.
  2. Intel Macs running Linux with KVM as nodes, labelled and tainted:
       kubectl label node <node> macvirt.io/apple-hardware=true
       kubectl taint node <node> macvirt.io/apple-hardware=true:NoSchedule
  3. The golden macOS and OpenCore images as CDI DataSources (by default in
     the namespace macvirt-images), and the namespace your pools keep their
     machines in.

Then a MacClass, a MacPool and a MacClaim (config/samples), and give tenants
the macvirt-claim-editor role in their namespaces (docs/tenancy.md).
{{- if .Values.prometheus.enabled }}

The ServiceMonitor and the alerts (a PrometheusRule, runbooks in
docs/runbooks) are installed.
{{- else }}

Alerts: --set prometheus.enabled=true installs the ServiceMonitor and the
alerts (a PrometheusRule) where the Prometheus Operator runs.
{{- end }}

Docs: https://github.com/macvirt/macvirt/blob/{{ .Chart.AppVersion }}/docs/install.md
`

// gatePrometheusRules renders the alerts the plugin templated from
// config/prometheus (as extras, always rendered) only with
// prometheus.enabled, as the chart's ServiceMonitor (without the
// Prometheus Operator's CRDs a PrometheusRule fails the install), and with
// the ServiceMonitor's prometheus.labels.
func gatePrometheusRules(chart string) error {
	files, err := filepath.Glob(filepath.Join(chart, "templates", "extras", "*.yaml"))
	if err != nil {
		return err
	}
	const gate = "{{- if .Values.prometheus.enabled }}\n"
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // the chart's own file.
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "\nkind: PrometheusRule\n") || strings.HasPrefix(string(b), gate) {
			continue
		}
		// prometheus.labels, as on the ServiceMonitor: a Prometheus that
		// selects rules by label (kube-prometheus-stack's release label)
		// loads them.
		const instance = "    app.kubernetes.io/instance: {{ .Release.Name }}\n"
		if !strings.Contains(string(b), instance) {
			return fmt.Errorf("%s has no %q label to add prometheus.labels after", f, strings.TrimSpace(instance))
		}
		t := strings.Replace(string(b), instance, instance+
			"    {{- with .Values.prometheus.labels }}\n"+
			"    {{- with omit . \"app.kubernetes.io/managed-by\" \"app.kubernetes.io/name\" \"helm.sh/chart\" \"app.kubernetes.io/instance\" }}\n"+
			"    {{- toYaml . | nindent 4 }}\n"+
			"    {{- end }}\n"+
			"    {{- end }}\n", 1)
		if err := os.WriteFile(f, []byte(gate+strings.TrimSuffix(t, "\n")+"\n{{- end }}\n"), 0o644); err != nil { //nolint:gosec // a chart file, world-readable.
			return err
		}
	}
	return nil
}
