package controllers_test

import (
	"context"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

// The golden renderings of internal/render are what the operator creates;
// a real API server with KubeVirt's and CDI's full schemas must accept every
// one of them under strict field validation, so a misspelt or misplaced
// field fails here instead of being pruned in a cluster.
var _ = Describe("Golden renderings", func() {
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "internal", "render", "testdata", "*.yaml"))
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
				// CDI's webhook refuses a clone from a DataSource that does
				// not exist: give each one the rendering names, here.
				if name, found, _ := unstructured.NestedString(obj.Object, "spec", "sourceRef", "name"); found && obj.GetKind() == "DataVolume" {
					if _, hasNS, _ := unstructured.NestedString(obj.Object, "spec", "sourceRef", "namespace"); hasNS {
						Expect(unstructured.SetNestedField(obj.Object, ns, "spec", "sourceRef", "namespace")).To(Succeed())
					}
					err := k8sClient.Create(context.Background(), &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
					Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
				}
				Expect(k8sClient.Create(context.Background(), obj)).To(Succeed(),
					"%s %s from %s", obj.GetKind(), obj.GetName(), filepath.Base(file))
			}
		})
	}

	It("would be refused with a misspelt field, so acceptance means something", func() {
		ns := newNamespace()
		obj := readObjects(filepath.Join(cluster.RepoRoot(), "internal", "render", "testdata", "default.yaml"))[0]
		obj.SetNamespace(ns)
		Expect(unstructured.SetNestedField(obj.Object, int64(1), "spec", "template", "spec", "domain", "cpu", "socket")).To(Succeed())
		Expect(k8sClient.Create(context.Background(), obj)).To(MatchError(ContainSubstring(`unknown field "spec.template.spec.domain.cpu.socket"`)))
	})
})

// readObjects decodes a multi-document YAML file, without status.
func readObjects(path string) []*unstructured.Unstructured {
	objs, err := cluster.ReadObjects(path)
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objs {
		unstructured.RemoveNestedField(obj.Object, "status")
	}
	return objs
}
