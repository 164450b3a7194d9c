package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// readObjects reads the objects of a YAML file of the repository's,
// typed by scheme.
func readObjects(path string, scheme *runtime.Scheme) ([]client.Object, error) {
	f, err := os.Open(path) //nolint:gosec // the repository's own samples.
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []client.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		obj, err := scheme.New(tm.GroupVersionKind())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, obj.(client.Object))
	}
}
