// Package main builds the KubeVirt VirtualMachine and VirtualMachineInstance
// CRDs the way KubeVirt's virt-operator does.
//
// KubeVirt builds its CRDs in Go, in NewVirtualMachineCrd and
// NewVirtualMachineInstanceCrd of
// kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components, and
// patches in the OpenAPI schemas kept as YAML strings in that package's
// CRDsValidation map (validations_generated.go). That package imports
// modules (kubevirt.io/virt-template-*) that the Go module proxy does not
// serve, so it cannot be compiled here. Instead this file reads the schemas
// from the package's source in the module cache and rebuilds the rest of the
// CRDs as those two functions do. Keep buildVirtualMachineCRD and
// buildVirtualMachineInstanceCRD in step with them when moving to a new
// KubeVirt version.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	virtv1 "kubevirt.io/api/core/v1"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
)

const (
	// kubevirtModule is the module that holds KubeVirt's CRD schemas.
	kubevirtModule = "kubevirt.io/kubevirt"
	// validationsFile is the file of kubevirtModule with the schemas.
	validationsFile = "pkg/virt-operator/resource/generate/components/validations_generated.go"
	// validationsVar is the map in validationsFile, keyed by the CRD's
	// singular name.
	validationsVar = "CRDsValidation"
)

// module is the part of `go mod download -json` output used here.
type module struct {
	Path    string
	Version string
	Dir     string
	Error   string
}

// locateKubevirt downloads (if needed) the kubevirt.io/kubevirt version this
// module requires and returns its version and source directory.
func locateKubevirt() (module, error) {
	var m module
	cmd := exec.Command("go", "mod", "download", "-json", kubevirtModule)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if len(out) > 0 {
		if jerr := json.Unmarshal(out, &m); jerr != nil {
			return m, fmt.Errorf("go mod download %s: %w", kubevirtModule, jerr)
		}
	}
	if m.Error != "" {
		return m, fmt.Errorf("go mod download %s: %s", kubevirtModule, m.Error)
	}
	if err != nil {
		return m, fmt.Errorf("go mod download %s: %w: %s", kubevirtModule, err, stderr.String())
	}
	if m.Dir == "" || m.Version == "" {
		return m, fmt.Errorf("go mod download %s: no directory or version reported", kubevirtModule)
	}
	return m, nil
}

// readValidations parses validations_generated.go in the KubeVirt source at
// dir and returns the schema YAML strings of the named CRDs (singular names).
func readValidations(dir string, names ...string) (map[string]string, error) {
	path := filepath.Join(dir, filepath.FromSlash(validationsFile))
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var lit *ast.CompositeLit
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if name.Name == validationsVar && i < len(vs.Values) {
					lit, _ = vs.Values[i].(*ast.CompositeLit)
				}
			}
		}
	}
	if lit == nil {
		return nil, fmt.Errorf("%s: no map literal %s", validationsFile, validationsVar)
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	found := make(map[string]string, len(names))
	for _, elt := range lit.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, err := stringLit(kv.Key)
		if err != nil || !want[key] {
			continue
		}
		value, err := stringLit(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: value for %q: %w", validationsFile, key, err)
		}
		found[key] = value
	}
	for _, n := range names {
		if _, ok := found[n]; !ok {
			return nil, fmt.Errorf("%s: no schema for %q", validationsFile, n)
		}
	}
	return found, nil
}

// stringLit returns the value of a Go string literal expression.
func stringLit(e ast.Expr) (string, error) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", fmt.Errorf("not a string literal")
	}
	return strconv.Unquote(bl.Value)
}

// decodeValidation turns a schema YAML string from CRDsValidation into a
// CustomResourceValidation, as KubeVirt's patchValidation does.
func decodeValidation(s string) (*extv1.CustomResourceValidation, error) {
	v := &extv1.CustomResourceValidation{}
	if err := k8syaml.NewYAMLToJSONDecoder(strings.NewReader(s)).Decode(v); err != nil {
		return nil, err
	}
	if v.OpenAPIV3Schema == nil || len(v.OpenAPIV3Schema.Properties) == 0 {
		return nil, fmt.Errorf("empty OpenAPI schema")
	}
	return v, nil
}

// newBlankCRD mirrors KubeVirt's newBlankCrd.
func newBlankCRD() *extv1.CustomResourceDefinition {
	return &extv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{
			APIVersion: "apiextensions.k8s.io/v1",
			Kind:       "CustomResourceDefinition",
		},
		ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{
				virtv1.AppLabel: "",
			},
		},
	}
}

// newCRDVersions mirrors KubeVirt's newCRDVersions: v1 (served, storage)
// and v1alpha3 (served, deprecated).
func newCRDVersions() []extv1.CustomResourceDefinitionVersion {
	versions := make([]extv1.CustomResourceDefinitionVersion, len(virtv1.ApiSupportedVersions))
	copy(versions, virtv1.ApiSupportedVersions)
	return versions
}

// setAllVersions sets the printer columns, subresources and schema of every
// version, as KubeVirt's addFieldsToAllVersions and
// patchValidationForAllVersions do. Each version gets its own copy.
func setAllVersions(crd *extv1.CustomResourceDefinition, columns []extv1.CustomResourceColumnDefinition, sub *extv1.CustomResourceSubresources, schema *extv1.CustomResourceValidation) {
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		v.AdditionalPrinterColumns = append([]extv1.CustomResourceColumnDefinition(nil), columns...)
		if sub != nil {
			v.Subresources = sub.DeepCopy()
		}
		v.Schema = schema.DeepCopy()
	}
}

// buildVirtualMachineCRD mirrors KubeVirt's NewVirtualMachineCrd.
func buildVirtualMachineCRD(schema *extv1.CustomResourceValidation) *extv1.CustomResourceDefinition {
	crd := newBlankCRD()
	crd.Name = "virtualmachines." + virtv1.VirtualMachineGroupVersionKind.Group
	crd.Spec = extv1.CustomResourceDefinitionSpec{
		Group:    virtv1.VirtualMachineGroupVersionKind.Group,
		Versions: newCRDVersions(),
		Scope:    "Namespaced",
		Names: extv1.CustomResourceDefinitionNames{
			Plural:     "virtualmachines",
			Singular:   "virtualmachine",
			Kind:       virtv1.VirtualMachineGroupVersionKind.Kind,
			ShortNames: []string{"vm", "vms"},
			Categories: []string{"all"},
		},
	}
	setAllVersions(crd, []extv1.CustomResourceColumnDefinition{
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		{Name: "Status", Description: "Human Readable Status", Type: "string", JSONPath: ".status.printableStatus"},
		{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
	}, &extv1.CustomResourceSubresources{
		Status: &extv1.CustomResourceSubresourceStatus{},
	}, schema)
	return crd
}

// buildVirtualMachineInstanceCRD mirrors KubeVirt's
// NewVirtualMachineInstanceCrd. KubeVirt gives this CRD no status
// subresource.
func buildVirtualMachineInstanceCRD(schema *extv1.CustomResourceValidation) *extv1.CustomResourceDefinition {
	crd := newBlankCRD()
	crd.Name = "virtualmachineinstances." + virtv1.VirtualMachineInstanceGroupVersionKind.Group
	crd.Spec = extv1.CustomResourceDefinitionSpec{
		Group:    virtv1.VirtualMachineInstanceGroupVersionKind.Group,
		Versions: newCRDVersions(),
		Scope:    "Namespaced",
		Names: extv1.CustomResourceDefinitionNames{
			Plural:     "virtualmachineinstances",
			Singular:   "virtualmachineinstance",
			Kind:       virtv1.VirtualMachineInstanceGroupVersionKind.Kind,
			ShortNames: []string{"vmi", "vmis"},
			Categories: []string{"all"},
		},
	}
	setAllVersions(crd, []extv1.CustomResourceColumnDefinition{
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
		{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
		{Name: "IP", Type: "string", JSONPath: ".status.interfaces[0].ipAddress"},
		{Name: "NodeName", Type: "string", JSONPath: ".status.nodeName"},
		{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
		{Name: "Live-Migratable", Type: "string", JSONPath: ".status.conditions[?(@.type=='LiveMigratable')].status", Priority: 1},
		{Name: "Paused", Type: "string", JSONPath: ".status.conditions[?(@.type=='Paused')].status", Priority: 1},
	}, nil, schema)
	return crd
}

// buildPluginCRD mirrors KubeVirt's NewPluginCrd (KubeVirt 1.9): one
// version, v1alpha1, cluster-scoped, no subresources or columns.
func buildPluginCRD(schema *extv1.CustomResourceValidation) *extv1.CustomResourceDefinition {
	crd := newBlankCRD()
	crd.Name = "plugins." + pluginv1alpha1.SchemeGroupVersion.Group
	crd.Spec = extv1.CustomResourceDefinitionSpec{
		Group:    pluginv1alpha1.SchemeGroupVersion.Group,
		Versions: []extv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true}},
		Scope:    "Cluster",
		Names: extv1.CustomResourceDefinitionNames{
			Plural:   "plugins",
			Singular: "plugin",
			Kind:     "Plugin",
			ListKind: "PluginList",
		},
	}
	setAllVersions(crd, nil, nil, schema)
	return crd
}
