// Package monitoring holds the operator's ServiceMonitor and alerts (a
// PrometheusRule) as the OLM install has the operator write them itself:
// OLM fails a whole install whose bundle carries an object of a kind the
// cluster does not serve, and the Prometheus Operator's kinds are there on
// some clusters only. monitor.yaml and rules.yaml are copies of
// config/prometheus's, which kustomize users enable as a Component; `make
// manifests` copies them and a test holds them equal.
package monitoring

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var (
	//go:embed monitor.yaml
	monitorYAML []byte
	//go:embed rules.yaml
	rulesYAML []byte
)

// NamePrefix is what config/default prefixes every name with.
const NamePrefix = "macvirt-"

// Objects are the ServiceMonitor and the PrometheusRule, named as
// config/default names them, in namespace.
func Objects(namespace string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, b := range [][]byte{monitorYAML, rulesYAML} {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			err := dec.Decode(&u.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("the embedded monitoring objects: %w", err)
			}
			if len(u.Object) == 0 {
				continue
			}
			u.SetName(NamePrefix + u.GetName())
			u.SetNamespace(namespace)
			labels := u.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels["app.kubernetes.io/managed-by"] = "macvirt-operator"
			u.SetLabels(labels)
			out = append(out, u)
		}
	}
	return out, nil
}
