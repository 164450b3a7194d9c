package harness

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// ReadObjects reads the objects of a YAML file of the repository's, typed
// by scheme; a field the type does not have is an error, not pruned.
func ReadObjects(path string, scheme *runtime.Scheme) ([]client.Object, error) {
	docs, err := cluster.ReadObjects(path)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(docs))
	for _, u := range docs {
		obj, err := scheme.New(u.GroupVersionKind())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
		out = append(out, obj.(client.Object))
	}
	return out, nil
}
