package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/macvirt/macvirt/internal/testenv"
)

// The golden renderings of internal/render are what the operator creates;
// a real API server with KubeVirt's and CDI's full schemas must accept every
// one of them under strict field validation, so a misspelt or misplaced
// field fails here instead of being pruned in a cluster.
var _ = Describe("Golden renderings", func() {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "internal", "render", "testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		panic("no golden renderings found in internal/render/testdata")
	}
	for _, file := range files {
		It("are accepted by the API server: "+filepath.Base(file), func() {
			ns := newNamespace()
			objs := readObjects(file)
			Expect(objs).NotTo(BeEmpty())
			for _, obj := range objs {
				obj.SetNamespace(ns)
				Expect(k8sClient.Create(context.Background(), obj)).To(Succeed(),
					"%s %s from %s", obj.GetKind(), obj.GetName(), filepath.Base(file))
			}
		})
	}

	It("would be refused with a misspelt field, so acceptance means something", func() {
		ns := newNamespace()
		obj := readObjects(filepath.Join(testenv.RepoRoot(), "internal", "render", "testdata", "default.yaml"))[0]
		obj.SetNamespace(ns)
		Expect(unstructured.SetNestedField(obj.Object, int64(1), "spec", "template", "spec", "domain", "cpu", "socket")).To(Succeed())
		Expect(k8sClient.Create(context.Background(), obj)).To(MatchError(ContainSubstring(`unknown field "spec.template.spec.domain.cpu.socket"`)))
	})
})

// readObjects decodes a multi-document YAML file.
func readObjects(path string) []*unstructured.Unstructured {
	data, err := os.ReadFile(path) //nolint:gosec // test fixture path built from a glob.
	Expect(err).NotTo(HaveOccurred())
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			Expect(err).NotTo(HaveOccurred())
		}
		if len(obj.Object) > 0 {
			unstructured.RemoveNestedField(obj.Object, "status")
			out = append(out, obj)
		}
	}
}
