package helmcheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// networkPolicyOption is the commented line of config/default's
// kustomization that adds config/network-policy ([NETWORK POLICY]).
const networkPolicyOption = "#- ../network-policy"

// kustomizeWithNetworkPolicy builds config/default as a user who turns its
// network-policy option on gets it: from a copy of config with that line
// uncommented, so the repository is left as it is.
func kustomizeWithNetworkPolicy(t *testing.T) []map[string]any {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(config, os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(config, "default", "kustomization.yaml")
	b, err := os.ReadFile(file) //nolint:gosec // the copy made above.
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	found := false
	for i, l := range lines {
		if strings.TrimSpace(l) == networkPolicyOption {
			lines[i] = strings.Replace(l, "#", "", 1)
			found = true
		}
	}
	if !found {
		t.Fatalf("config/default/kustomization.yaml has no %q line to turn the NetworkPolicies on", networkPolicyOption)
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil { //nolint:gosec // the copy made above.
		t.Fatal(err)
	}
	kustomizeBin, err := filepath.Abs(filepath.Join(root, "bin", "kustomize"))
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kustomizeBin, "build", filepath.Join(config, "default")) //nolint:gosec // the repository's own kustomize.
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build config/default with %s on (make kustomize installs it): %v\n%s", networkPolicyOption, err, stderr.String())
	}
	objs, err := Decode("config/default", out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// networkPolicyOn renders the chart with its NetworkPolicies, the webhooks
// and metrics on, and the RBAC helpers as config/default has them.
var networkPolicyOn = map[string]any{
	"rbac":          map[string]any{"helpers": map[string]any{"enabled": true}},
	"networkPolicy": map[string]any{"enabled": true},
	"webhook":       map[string]any{"enabled": true},
	"metrics":       map[string]any{"enabled": true},
}

// TestNetworkPoliciesAdmitEveryManagerPort: once a NetworkPolicy selects
// the manager's pod, whatever no policy lets in is dropped, so every port
// the manager serves must be let in: each containerPort of its container
// and the metrics port (--metrics-bind-address, not declared as one). It
// checks config/default with its network-policy option on and the chart
// with networkPolicy.enabled, as two releases. A port only the kubelet's
// probes use is exempt: traffic from the pod's own node is always allowed,
// whatever the policies say.
func TestNetworkPoliciesAdmitEveryManagerPort(t *testing.T) {
	t.Run("kustomize", func(t *testing.T) {
		checkManagerPortsAdmitted(t, kustomizeWithNetworkPolicy(t))
	})
	for _, r := range []struct{ release, namespace string }{{"macvirt", "macvirt-system"}, {"ops-macs", "platform"}} {
		t.Run("chart/"+r.release, func(t *testing.T) {
			checkManagerPortsAdmitted(t, render(t, r.release, r.namespace, networkPolicyOn))
		})
	}
}

// TestChartNetworkPoliciesAreTheKustomizeOnes: with networkPolicy.enabled
// the chart installs config/network-policy's policies, field for field
// but for the differences in form normalize lists, and no others, so the
// two cannot drift apart.
func TestChartNetworkPoliciesAreTheKustomizeOnes(t *testing.T) {
	policies := func(objs []map[string]any) map[string]map[string]any {
		out := map[string]map[string]any{}
		for k, o := range index(objs) {
			if o["kind"] == "NetworkPolicy" {
				out[k] = o
			}
		}
		return out
	}
	want := policies(kustomizeWithNetworkPolicy(t))
	got := policies(render(t, "macvirt", "macvirt-system", networkPolicyOn))
	if len(want) == 0 {
		t.Fatalf("config/default with %s on installs no NetworkPolicy", networkPolicyOption)
	}
	var problems []string
	for k, w := range want {
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
		t.Errorf("the chart's NetworkPolicies are not config/network-policy's:\n%s", strings.Join(problems, "\n"))
	}
}

// servedPort is a port the manager listens on.
type servedPort struct {
	number   int
	name     string
	protocol string
	what     string
}

func checkManagerPortsAdmitted(t *testing.T, objs []map[string]any) {
	t.Helper()
	var dep map[string]any
	for _, o := range objs {
		if o["kind"] == "Deployment" && strings.HasSuffix(Key(o), "controller-manager") {
			dep = o
		}
	}
	if dep == nil {
		t.Fatal("no controller-manager Deployment")
	}
	meta, _ := dep["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	template := dig(dep, "spec", "template")
	podLabels, _ := dig(template, "metadata")["labels"].(map[string]any)
	var manager map[string]any
	containers, _ := dig(template, "spec")["containers"].([]any)
	for _, c := range containers {
		if m, _ := c.(map[string]any); m["name"] == "manager" {
			manager = m
		}
	}
	if manager == nil {
		t.Fatalf("%s has no manager container", Key(dep))
	}

	var served []servedPort
	ports, _ := manager["ports"].([]any)
	for _, p := range ports {
		m, _ := p.(map[string]any)
		n, _ := m["containerPort"].(float64)
		name, _ := m["name"].(string)
		served = append(served, servedPort{int(n), name, protocolOf(m), "containerPort " + name})
	}
	args, _ := manager["args"].([]any)
	for _, a := range args {
		addr, ok := strings.CutPrefix(fmt.Sprint(a), "--metrics-bind-address=")
		if !ok {
			continue
		}
		_, port, _ := strings.Cut(addr, ":")
		if n, err := strconv.Atoi(port); err == nil && n > 0 {
			served = append(served, servedPort{n, "", "TCP", "metrics (" + fmt.Sprint(a) + ")"})
		}
	}
	if len(served) == 0 {
		t.Fatalf("the manager container of %s serves no port", Key(dep))
	}

	var policies []map[string]any
	for _, o := range objs {
		if o["kind"] != "NetworkPolicy" {
			continue
		}
		pmeta, _ := o["metadata"].(map[string]any)
		if pns, _ := pmeta["namespace"].(string); pns != ns {
			continue
		}
		spec := dig(o, "spec")
		selector := dig(spec, "podSelector")
		if !selects(t, selector, podLabels) || !hasIngress(spec) {
			continue
		}
		policies = append(policies, o)
	}
	if len(policies) == 0 {
		t.Fatalf("no NetworkPolicy selects the manager's pod (labels %v) for ingress", podLabels)
	}
	var names []string
	for _, p := range policies {
		names = append(names, Key(p))
	}

	var blocked []string
	for _, sp := range served {
		if probeOnly(manager, objs, ns, podLabels, sp) {
			t.Logf("%d (%s) is used by the kubelet's probes only, which the policies do not filter", sp.number, sp.what)
			continue
		}
		admitted := false
		for _, p := range policies {
			if admits(p, sp) {
				admitted = true
				t.Logf("%d/%s (%s) is let in by %s", sp.number, sp.protocol, sp.what, Key(p))
				break
			}
		}
		if !admitted {
			blocked = append(blocked, fmt.Sprintf("%d/%s (%s)", sp.number, sp.protocol, sp.what))
		}
	}
	if len(blocked) > 0 {
		t.Errorf("the manager serves %s, which no NetworkPolicy selecting its pod lets in (%s)", strings.Join(blocked, ", "), strings.Join(names, ", "))
	}
}

// probeOnly: a probe of the container uses the port, and no Service
// selecting the pod sends traffic to it.
func probeOnly(container map[string]any, objs []map[string]any, ns string, podLabels map[string]any, sp servedPort) bool {
	probed := false
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		pr, _ := container[probe].(map[string]any)
		for _, handler := range []string{"httpGet", "tcpSocket", "grpc"} {
			h, _ := pr[handler].(map[string]any)
			if h != nil && portIs(h["port"], sp) {
				probed = true
			}
		}
	}
	if !probed {
		return false
	}
	for _, o := range objs {
		if o["kind"] != "Service" {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		if sns, _ := meta["namespace"].(string); sns != ns {
			continue
		}
		sel, _ := dig(o, "spec")["selector"].(map[string]any)
		if len(sel) == 0 || !subset(sel, podLabels) {
			continue
		}
		ports, _ := dig(o, "spec")["ports"].([]any)
		for _, p := range ports {
			m, _ := p.(map[string]any)
			target := m["targetPort"]
			if target == nil {
				target = m["port"]
			}
			if portIs(target, sp) {
				return false
			}
		}
	}
	return true
}

// admits: a rule of the policy lets some source in on the port.
func admits(policy map[string]any, sp servedPort) bool {
	rules, _ := dig(policy, "spec")["ingress"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		ports, _ := rule["ports"].([]any)
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			m, _ := p.(map[string]any)
			if protocolOf(m) != sp.protocol {
				continue
			}
			port, ok := m["port"]
			if !ok || port == nil {
				return true
			}
			if end, ok := m["endPort"].(float64); ok {
				if start, ok := port.(float64); ok && float64(sp.number) >= start && float64(sp.number) <= end {
					return true
				}
				continue
			}
			if portIs(port, sp) {
				return true
			}
		}
	}
	return false
}

// portIs: a port number or name, as a probe, Service or policy gives it,
// is the served port.
func portIs(v any, sp servedPort) bool {
	switch v := v.(type) {
	case float64:
		return int(v) == sp.number
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n == sp.number
		}
		return v != "" && v == sp.name
	}
	return false
}

func protocolOf(m map[string]any) string {
	if p, _ := m["protocol"].(string); p != "" {
		return p
	}
	return "TCP"
}

func hasIngress(spec map[string]any) bool {
	types, ok := spec["policyTypes"].([]any)
	if !ok {
		// Without policyTypes a policy always restricts ingress.
		return true
	}
	for _, ty := range types {
		if ty == "Ingress" {
			return true
		}
	}
	return false
}

// selects evaluates a label selector against labels.
func selects(t *testing.T, selector, labels map[string]any) bool {
	t.Helper()
	match, _ := selector["matchLabels"].(map[string]any)
	if !subset(match, labels) {
		return false
	}
	exprs, _ := selector["matchExpressions"].([]any)
	for _, e := range exprs {
		m, _ := e.(map[string]any)
		key, _ := m["key"].(string)
		values, _ := m["values"].([]any)
		v, has := labels[key]
		in := false
		for _, x := range values {
			if has && fmt.Sprint(x) == fmt.Sprint(v) {
				in = true
			}
		}
		switch m["operator"] {
		case "In":
			if !in {
				return false
			}
		case "NotIn":
			if in {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			t.Fatalf("a podSelector with operator %v", m["operator"])
		}
	}
	return true
}

func subset(want, labels map[string]any) bool {
	for k, v := range want {
		if l, ok := labels[k]; !ok || fmt.Sprint(l) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// dig follows keys through nested maps; a missing one gives an empty map.
func dig(obj map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		obj, _ = obj[k].(map[string]any)
	}
	if obj == nil {
		return map[string]any{}
	}
	return obj
}
