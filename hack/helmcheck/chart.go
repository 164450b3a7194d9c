package helmcheck

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

// Render renders the chart in dir as `helm install <release> <dir> -n
// <namespace>` with values set would, and returns its objects.
func Render(dir, release, namespace string, set map[string]any) ([]map[string]any, error) {
	chart, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", dir, err)
	}
	vals, err := chartutil.ToRenderValues(chart, set, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(chart, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []map[string]any
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		objs, err := Decode(name, []byte(files[name]))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// Decode splits a YAML stream into objects.
func Decode(name string, b []byte) ([]map[string]any, error) {
	var out []map[string]any
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(obj) > 0 {
			out = append(out, obj)
		}
	}
	return out, nil
}

// Key is an object's kind, namespace and name.
func Key(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	return fmt.Sprintf("%v %s/%s", obj["kind"], ns, name)
}

// HelpersOn turns on the chart's optional per-kind admin, editor and viewer
// roles, which config/default always installs.
var HelpersOn = map[string]any{"rbac": map[string]any{"helpers": map[string]any{"enabled": true}}}

// Template turns an object of config/default (namespace namespace, names
// prefixed prefix) into a template of the chart named chart: its
// namespace becomes the release's, each prefixed name the chart's
// resource name, and it gets the chart's labels. cert-manager objects are
// rendered only with certManager.enabled, as the chart's own are.
func Template(obj map[string]any, chart, namespace, prefix string) (string, error) {
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				v[k] = walk(c)
			}
			return v
		case []any:
			for i, c := range v {
				v[i] = walk(c)
			}
			return v
		case string:
			if v == namespace {
				return "@@namespace@@"
			}
			if suffix, ok := strings.CutPrefix(v, prefix); ok && suffix != "" {
				return "@@name:" + suffix + "@@"
			}
		}
		return v
	}
	walk(obj)
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		return "", fmt.Errorf("%s has no metadata", Key(obj))
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels["app.kubernetes.io/managed-by"] = "@@service@@"
	labels["helm.sh/chart"] = "@@chart@@"
	labels["app.kubernetes.io/instance"] = "@@release@@"
	if labels["app.kubernetes.io/name"] == chart {
		labels["app.kubernetes.io/name"] = "@@chartname@@"
	}
	meta["labels"] = labels
	b, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	s := string(b)
	for placeholder, expr := range map[string]string{
		"@@namespace@@": "{{ .Release.Namespace }}",
		"@@service@@":   "{{ .Release.Service }}",
		"@@chart@@":     `{{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}`,
		"@@release@@":   "{{ .Release.Name }}",
		"@@chartname@@": `{{ include "` + chart + `.name" . }}`,
	} {
		s = strings.ReplaceAll(s, placeholder, expr)
	}
	for {
		i := strings.Index(s, "@@name:")
		if i < 0 {
			break
		}
		j := strings.Index(s[i+len("@@name:"):], "@@")
		if j < 0 {
			return "", fmt.Errorf("%s: an unterminated name placeholder", Key(obj))
		}
		suffix := s[i+len("@@name:") : i+len("@@name:")+j]
		s = s[:i] + `{{ include "` + chart + `.resourceName" (dict "suffix" "` + suffix + `" "context" $) }}` + s[i+len("@@name:")+j+2:]
	}
	if apiVersion, _ := obj["apiVersion"].(string); strings.HasPrefix(apiVersion, "cert-manager.io/") {
		s = "{{- if .Values.certManager.enabled }}\n" + s + "{{- end }}\n"
	}
	return s, nil
}
