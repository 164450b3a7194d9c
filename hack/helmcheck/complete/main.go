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
	// The NetworkPolicies render only with networkPolicy.enabled.
	got, err := helmcheck.Render(chart, strings.TrimSuffix(prefix, "-"), namespace, map[string]any{
		"rbac":          helmcheck.HelpersOn["rbac"],
		"networkPolicy": map[string]any{"enabled": true},
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
// plugin turns networkPolicy on by default when the kustomize output has
// policies; config/default leaves them off, and so does the chart.
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
	if err := os.WriteFile(values, b, 0o644); err != nil { //nolint:gosec // a chart file, world-readable.
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
