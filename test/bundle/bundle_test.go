package bundle

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	apierrors "github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/internal/domainhook/install"
	"github.com/macvirt/macvirt/internal/monitoring"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

var root = cluster.RepoRoot()

// loadBundle reads bundle/ the way OLM's tooling does.
func loadBundle(t *testing.T) *apimanifests.Bundle {
	t.Helper()
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, "bundle", "manifests"))
	if err != nil {
		t.Fatalf("loading bundle/manifests: %v", err)
	}
	if b.CSV == nil {
		t.Fatal("bundle/manifests has no ClusterServiceVersion")
	}
	return b
}

// TestValidators runs operator-framework/api's validators the way
// `operator-sdk bundle validate --select-optional suite=operatorframework`
// does: the default bundle set (CSV, CRD, bundle) plus OperatorHub v2,
// capabilities, categories, good practices and deprecated APIs, each on its
// own so the counts say which one complained. No errors are allowed, and
// no warnings but the known one.
func TestValidators(t *testing.T) {
	b := loadBundle(t)
	named := []struct {
		name string
		v    interfaces.Validator
	}{
		{"ClusterServiceVersion", validation.ClusterServiceVersionValidator},
		{"CustomResourceDefinition", validation.CustomResourceDefinitionValidator},
		{"Bundle", validation.BundleValidator},
		{"OperatorHubV2", validation.OperatorHubV2Validator},
		{"StandardCapabilities", validation.StandardCapabilitiesValidator},
		{"StandardCategories", validation.StandardCategoriesValidator},
		{"GoodPractices", validation.GoodPracticesValidator},
		{"AlphaDeprecatedAPIs", validation.AlphaDeprecatedAPIsValidator},
	}
	if len(validation.DefaultBundleValidators) != 3 {
		t.Fatalf("the default bundle set has %d validators; this test names 3", len(validation.DefaultBundleValidators))
	}
	objs := append(b.ObjectsToValidate(), map[string]string{"k8s-version": minKubeMajorMinor(t, b.CSV)})
	for _, n := range named {
		results := n.v.Validate(objs...)
		if len(results) == 0 {
			t.Errorf("%s returned no result: it did not run", n.name)
		}
		var errs, warns, known int
		for _, r := range results {
			for _, e := range r.Errors {
				errs++
				t.Errorf("%s on %s: error: %s", n.name, r.Name, e)
			}
			for _, w := range r.Warnings {
				warns++
				if knownWarning(w.Error()) {
					known++
					t.Logf("%s on %s: known warning: %s", n.name, r.Name, w)
					continue
				}
				t.Errorf("%s on %s: warning: %s", n.name, r.Name, w)
			}
		}
		t.Logf("%-24s %2d results, %d errors, %d warnings (%d known)", n.name, len(results), errs, warns, known)
	}

	// The validators can fail: a CSV without a provider or with an unknown
	// category is refused.
	all := validation.DefaultBundleValidators.WithValidators(validation.OperatorHubV2Validator, validation.StandardCategoriesValidator)
	bad := b.CSV.DeepCopy()
	bad.Spec.Provider.Name = ""
	bad.Annotations["categories"] = "Macs"
	b.CSV = bad
	if n := countErrors(all.Validate(append(b.ObjectsToValidate(), map[string]string{})...)); n < 2 {
		t.Errorf("a CSV with no provider and an unknown category gave %d errors, want at least 2", n)
	}
}

// knownWarning accepts two warnings, each for one API only:
//   - the deprecated-API validator's false positive: it matches RBAC rules
//     by resource name alone (rules carry no version), so the operator's
//     rules for events (events.k8s.io/v1) and endpointslices
//     (discovery.k8s.io/v1) look like the v1beta1 APIs removed in 1.25. Any
//     other API named in the warning makes it unknown;
//   - no alm-example for MacMachine: the CSV lists it as an internal object
//     (pools and claims make machines), which the validator does not read;
//     nor for the tunnel's API (subresources.macvirt.io), which has no
//     objects, only the portforward subresource of claims.
func knownWarning(w string) bool {
	if strings.Contains(w, "provided API should have an example annotation") {
		return strings.Contains(w, "Value macvirt.io/v1alpha1, Kind=MacMachine:") ||
			strings.Contains(w, "Value subresources.macvirt.io/v1alpha1, Kind=MacClaim:")
	}
	if !strings.Contains(w, "deprecated and removed in v1.25") || !strings.Contains(w, "ClusterPermissions[0].Rules[") {
		return false
	}
	named := regexp.MustCompile(`(\w+): \(\[`).FindAllStringSubmatch(w, -1)
	if len(named) == 0 {
		return false
	}
	for _, n := range named {
		if n[1] != "events" && n[1] != "endpointslices" {
			return false
		}
	}
	return true
}

func countErrors(results []apierrors.ManifestResult) int {
	n := 0
	for _, r := range results {
		n += len(r.Errors)
	}
	return n
}

func minKubeMajorMinor(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) string {
	parts := strings.Split(csv.Spec.MinKubeVersion, ".")
	if len(parts) < 2 {
		t.Fatalf("minKubeVersion %q is not major.minor.patch", csv.Spec.MinKubeVersion)
	}
	return parts[0] + "." + parts[1]
}

// examples are the CSV's alm-examples.
func examples(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) []unstructured.Unstructured {
	t.Helper()
	var list []map[string]any
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &list); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	out := make([]unstructured.Unstructured, 0, len(list))
	for _, m := range list {
		out = append(out, unstructured.Unstructured{Object: m})
	}
	return out
}

func crdsByKind(b *apimanifests.Bundle) map[string]*apiextensionsv1.CustomResourceDefinition {
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, crd := range b.V1CRDs {
		out[crd.Spec.Names.Kind] = crd
	}
	return out
}

func schemaOf(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}

// TestScorecardBasicAndOLM reproduces operator-sdk scorecard's basic and
// olm suites on the bundle.
func TestScorecardBasicAndOLM(t *testing.T) {
	b := loadBundle(t)
	crds := crdsByKind(b)
	owned := map[string]operatorsv1alpha1.CRDDescription{}
	for _, d := range b.CSV.Spec.CustomResourceDefinitions.Owned {
		owned[d.Kind] = d
	}
	exs := examples(t, b.CSV)
	kinds := map[string]bool{}
	for _, ex := range exs {
		kind := ex.GetKind()
		kinds[kind] = true
		// basic-check-spec: every example has a spec.
		spec, ok := ex.Object["spec"].(map[string]any)
		if !ok || len(spec) == 0 {
			t.Errorf("basic-check-spec: alm-example %s %s has no spec", kind, ex.GetName())
		}
		// olm-crds-have-validation: every field of the example is in its CRD's schema.
		crd := crds[kind]
		if crd == nil {
			t.Errorf("olm-crds-have-validation: alm-example %s has no CRD in the bundle", kind)
			continue
		}
		gv := strings.Split(ex.GetAPIVersion(), "/")
		schema := schemaOf(crd, gv[len(gv)-1])
		if schema == nil {
			t.Errorf("olm-crds-have-validation: CRD %s has no schema for %s", crd.Name, ex.GetAPIVersion())
			continue
		}
		for _, path := range unknownFields(spec, schema.Properties["spec"], "spec") {
			t.Errorf("olm-crds-have-validation: alm-example %s has %s, which its CRD's schema lacks", kind, path)
		}
		// olm-spec-descriptors: every spec field of the example has a descriptor.
		d, ok := owned[kind]
		if !ok {
			t.Errorf("alm-example %s is not an owned CRD of the CSV", kind)
			continue
		}
		for field := range spec {
			if !slices.ContainsFunc(d.SpecDescriptors, func(sd operatorsv1alpha1.SpecDescriptor) bool { return sd.Path == field }) {
				t.Errorf("olm-spec-descriptors: %s spec.%s has no specDescriptor", kind, field)
			}
		}
	}
	for kind, d := range owned {
		// olm-crds-have-resources.
		if len(d.Resources) == 0 {
			t.Errorf("olm-crds-have-resources: owned CRD %s lists no resources", kind)
		}
		if d.DisplayName == "" || d.Description == "" {
			t.Errorf("owned CRD %s needs a displayName and a description", kind)
		}
		crd := crds[kind]
		if crd == nil || crd.Name != d.Name {
			t.Errorf("owned CRD %s (%s) is not in the bundle", d.Name, kind)
			continue
		}
		schema := schemaOf(crd, d.Version)
		if schema == nil {
			t.Errorf("owned CRD %s: no schema for version %s", kind, d.Version)
			continue
		}
		// Stricter than scorecard's olm-spec-descriptors and
		// olm-status-descriptors: every top-level spec and status field of
		// the schema has a descriptor with a description.
		for field := range schema.Properties["spec"].Properties {
			i := slices.IndexFunc(d.SpecDescriptors, func(sd operatorsv1alpha1.SpecDescriptor) bool { return sd.Path == field })
			if i < 0 || d.SpecDescriptors[i].Description == "" || d.SpecDescriptors[i].DisplayName == "" {
				t.Errorf("%s spec.%s has no specDescriptor with a display name and description", kind, field)
			}
		}
		for field := range schema.Properties["status"].Properties {
			i := slices.IndexFunc(d.StatusDescriptors, func(sd operatorsv1alpha1.StatusDescriptor) bool { return sd.Path == field })
			if i < 0 || d.StatusDescriptors[i].Description == "" || d.StatusDescriptors[i].DisplayName == "" {
				t.Errorf("%s status.%s has no statusDescriptor with a display name and description", kind, field)
			}
		}
	}
	for _, kind := range []string{"MacClass", "MacPool", "MacClaim"} {
		if !kinds[kind] {
			t.Errorf("alm-examples have no %s", kind)
		}
	}
	// Machines are the operator's: pools and claims make them. The console
	// hides them from its "create" forms, and offers no example of one.
	var internal []string
	if err := json.Unmarshal([]byte(b.CSV.Annotations["operators.operatorframework.io/internal-objects"]), &internal); err != nil {
		t.Errorf("operators.operatorframework.io/internal-objects: %v", err)
	}
	if !slices.Equal(internal, []string{"macmachines.macvirt.io"}) {
		t.Errorf("operators.operatorframework.io/internal-objects = %q, want MacMachine's CRD alone", internal)
	}
	if kinds["MacMachine"] {
		t.Error("alm-examples have a MacMachine, which only the operator makes")
	}
}

// unknownFields lists the paths of obj that schema does not declare.
func unknownFields(obj map[string]any, schema apiextensionsv1.JSONSchemaProps, path string) []string {
	var out []string
	for k, v := range obj {
		p, ok := schema.Properties[k]
		if !ok {
			if schema.XPreserveUnknownFields == nil || !*schema.XPreserveUnknownFields {
				out = append(out, path+"."+k)
			}
			continue
		}
		if m, ok := v.(map[string]any); ok {
			out = append(out, unknownFields(m, p, path+"."+k)...)
		}
	}
	return out
}

// TestAlmExamplesAreTheSamples: the examples OperatorHub shows are the
// samples in config/samples, which the sandbox applies, plus the ones in
// config/manifests/examples.
func TestAlmExamplesAreTheSamples(t *testing.T) {
	b := loadBundle(t)
	exs := examples(t, b.CSV)
	entries, err := filepath.Glob(filepath.Join(root, "config", "samples", "macvirt_*.yaml"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no samples in config/samples (%v)", err)
	}
	more, _ := filepath.Glob(filepath.Join(root, "config", "manifests", "examples", "macvirt_*.yaml"))
	entries = append(entries, more...)
	if len(entries) != len(exs) {
		t.Errorf("%d samples, %d alm-examples", len(entries), len(exs))
	}
	for _, f := range entries {
		data, err := os.ReadFile(f) //nolint:gosec // repository files.
		if err != nil {
			t.Fatal(err)
		}
		var sample map[string]any
		if err := yaml.Unmarshal(data, &sample); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(sample)
		if !slices.ContainsFunc(exs, func(ex unstructured.Unstructured) bool {
			got, _ := json.Marshal(ex.Object)
			return string(got) == string(want)
		}) {
			t.Errorf("%s is not among the alm-examples (run make bundle)", filepath.Base(f))
		}
	}
}

// TestInstallRequirements: AllNamespaces only; KubeVirt's VirtualMachine
// and CDI's DataVolume as native APIs, so OLM holds the install until the
// cluster serves them; the webhooks and the manager wired for OLM.
func TestInstallRequirements(t *testing.T) {
	csv := loadBundle(t).CSV
	for _, m := range csv.Spec.InstallModes {
		if m.Supported != (m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces) {
			t.Errorf("install mode %s supported=%v; only AllNamespaces is supported", m.Type, m.Supported)
		}
	}
	if len(csv.Spec.InstallModes) != 4 {
		t.Errorf("%d install modes, want all 4 stated", len(csv.Spec.InstallModes))
	}
	for _, want := range [][3]string{{"kubevirt.io", "v1", "VirtualMachine"}, {"cdi.kubevirt.io", "v1beta1", "DataVolume"}} {
		if !slices.ContainsFunc(csv.Spec.NativeAPIs, func(g metav1.GroupVersionKind) bool {
			return g.Group == want[0] && g.Version == want[1] && g.Kind == want[2]
		}) {
			t.Errorf("spec.nativeAPIs lacks %v", want)
		}
	}
	if len(csv.Spec.CustomResourceDefinitions.Required) != 0 {
		t.Error("spec.customresourcedefinitions.required would demand another operator's CSV; use nativeAPIs")
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"minKubeVersion", csv.Spec.MinKubeVersion != ""},
		{"icon", len(csv.Spec.Icon) == 1 && csv.Spec.Icon[0].MediaType == "image/svg+xml" && csv.Spec.Icon[0].Data != ""},
		{"maintainers", len(csv.Spec.Maintainers) > 0},
		{"links", len(csv.Spec.Links) > 0},
		{"keywords", len(csv.Spec.Keywords) > 0},
		{"capabilities", csv.Annotations["capabilities"] != ""},
		{"categories", csv.Annotations["categories"] != ""},
		{"containerImage", csv.Annotations["containerImage"] != ""},
		{"relatedImages", len(csv.Spec.RelatedImages) >= 2},
	} {
		if !f.ok {
			t.Errorf("the CSV lacks %s", f.name)
		}
	}

	deps := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want the manager only", len(deps))
	}
	dep := deps[0]
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != csv.Annotations["containerImage"] {
		t.Errorf("manager image %s, containerImage %s", c.Image, csv.Annotations["containerImage"])
	}
	for _, arg := range []string{"--leader-elect", "--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("manager args %v lack %s", c.Args, arg)
		}
	}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("volume %s needs Secret %s, which nothing in an OLM install creates", v.Name, v.Secret.SecretName)
		}
	}
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	webhooks := webhookPaths(t)
	if len(csv.Spec.WebhookDefinitions) != len(webhooks) {
		t.Errorf("%d webhook definitions, config/webhook has %d webhooks", len(csv.Spec.WebhookDefinitions), len(webhooks))
	}
	for _, w := range csv.Spec.WebhookDefinitions {
		if w.DeploymentName != dep.Name {
			t.Errorf("webhook %s: deploymentName %s, want %s", w.GenerateName, w.DeploymentName, dep.Name)
		}
		if w.TargetPort == nil || !ports[w.TargetPort.StrVal] {
			t.Errorf("webhook %s: targetPort %v is not a named port of the manager", w.GenerateName, w.TargetPort)
		}
		if w.WebhookPath == nil || webhooks[w.GenerateName] != *w.WebhookPath {
			t.Errorf("webhook %s: path %v, config/webhook says %q", w.GenerateName, w.WebhookPath, webhooks[w.GenerateName])
		}
		if w.SideEffects == nil || len(w.AdmissionReviewVersions) == 0 || len(w.Rules) == 0 {
			t.Errorf("webhook %s lacks sideEffects, admissionReviewVersions or rules", w.GenerateName)
		}
	}
}

// webhookPaths maps each webhook in config/webhook/manifests.yaml to its path.
func webhookPaths(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, u := range readObjects(t, filepath.Join(root, "config", "webhook", "manifests.yaml")) {
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for _, h := range hooks {
			m := h.(map[string]any)
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			out[m["name"].(string)] = path
		}
	}
	return out
}

func readObjects(t *testing.T, file string) []unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file) //nolint:gosec // repository files.
	if err != nil {
		t.Fatal(err)
	}
	return splitYAML(t, string(data))
}

func splitYAML(t *testing.T, data string) []unstructured.Unstructured {
	t.Helper()
	var out []unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(data, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			out = append(out, unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// TestPermissionsAreTheGeneratedRBAC: what OLM grants the manager is
// exactly what controller-gen generates from the +kubebuilder:rbac markers,
// plus leader election (namespaced) and metrics authentication (cluster).
func TestPermissionsAreTheGeneratedRBAC(t *testing.T) {
	spec := loadBundle(t).CSV.Spec.InstallStrategy.StrategySpec
	var wantCluster, wantNamespaced []rbacv1.PolicyRule
	for _, f := range []string{"role.yaml", "metrics_auth_role.yaml", "leader_election_role.yaml"} {
		for _, u := range readObjects(t, filepath.Join(root, "config", "rbac", f)) {
			var rules struct {
				Rules []rbacv1.PolicyRule `json:"rules"`
			}
			data, _ := json.Marshal(u.Object)
			if err := json.Unmarshal(data, &rules); err != nil {
				t.Fatal(err)
			}
			if u.GetKind() == "ClusterRole" {
				wantCluster = append(wantCluster, rules.Rules...)
			} else {
				wantNamespaced = append(wantNamespaced, rules.Rules...)
			}
		}
	}
	if len(wantCluster) < 10 || len(wantNamespaced) < 3 {
		t.Fatalf("read %d cluster and %d namespaced rules from config/rbac: too few", len(wantCluster), len(wantNamespaced))
	}
	check := func(what string, got []operatorsv1alpha1.StrategyDeploymentPermissions, want []rbacv1.PolicyRule) {
		if len(got) != 1 {
			t.Errorf("%s: %d entries, want one for the manager's ServiceAccount", what, len(got))
			return
		}
		if !sameRules(got[0].Rules, want) {
			t.Errorf("%s differ from config/rbac:\n got %v\nwant %v", what, got[0].Rules, want)
		}
	}
	check("clusterPermissions", spec.ClusterPermissions, wantCluster)
	check("permissions", spec.Permissions, wantNamespaced)
	sa := spec.DeploymentSpecs[0].Spec.Template.Spec.ServiceAccountName
	for _, p := range append(spec.Permissions, spec.ClusterPermissions...) {
		if p.ServiceAccountName != sa {
			t.Errorf("permissions for %s, the manager runs as %s", p.ServiceAccountName, sa)
		}
	}
}

func sameRules(a, b []rbacv1.PolicyRule) bool {
	key := func(rs []rbacv1.PolicyRule) []string {
		out := make([]string, 0, len(rs))
		for _, r := range rs {
			data, _ := json.Marshal(r)
			out = append(out, string(data))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// TestBundleFormat: the layout and annotations OLM and registries expect,
// and bundle.Dockerfile labels equal to annotations.yaml.
func TestBundleFormat(t *testing.T) {
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	data, err := os.ReadFile(filepath.Join(root, "bundle", "metadata", "annotations.yaml")) //nolint:gosec // a repository file.
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &ann); err != nil {
		t.Fatal(err)
	}
	a := ann.Annotations
	const p = "operators.operatorframework.io.bundle."
	for key, want := range map[string]string{p + "mediatype.v1": "registry+v1", p + "manifests.v1": "manifests/",
		p + "metadata.v1": "metadata/", p + "package.v1": "macvirt"} {
		if a[key] != want {
			t.Errorf("%s = %q, want %q", key, a[key], want)
		}
	}
	channels := strings.Split(a[p+"channels.v1"], ",")
	if a[p+"channels.v1"] == "" || !slices.Contains(channels, a[p+"channel.default.v1"]) {
		t.Errorf("default channel %q is not among channels %q", a[p+"channel.default.v1"], channels)
	}
	labels := dockerfileLabels(t)
	if len(labels) != len(a) {
		t.Errorf("bundle.Dockerfile has %d labels, annotations.yaml %d", len(labels), len(a))
	}
	for k, v := range a {
		if labels[k] != v {
			t.Errorf("bundle.Dockerfile label %s=%q, annotations.yaml says %q", k, labels[k], v)
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if !slices.Equal(dirs, []string{"manifests", "metadata"}) {
		t.Errorf("bundle/ holds %v, want manifests and metadata only", dirs)
	}
	manifests, _ := os.ReadDir(filepath.Join(root, "bundle", "manifests"))
	for _, e := range manifests {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			t.Errorf("bundle/manifests/%s: OLM refuses subdirectories and hidden files", e.Name())
		}
	}
}

func dockerfileLabels(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "bundle.Dockerfile")) //nolint:gosec // a repository file.
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]string{}
	var copies []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "LABEL "), "="); ok && strings.HasPrefix(line, "LABEL ") {
			out[k] = v
		}
		if strings.HasPrefix(line, "COPY ") {
			copies = append(copies, line)
		}
	}
	if !slices.Equal(copies, []string{"COPY bundle/manifests /manifests/", "COPY bundle/metadata /metadata/"}) {
		t.Errorf("bundle.Dockerfile copies %v", copies)
	}
	return out
}

// TestImagesAreNamedOnce: the Makefile's VERSION and IMAGE_REGISTRY decide
// every image reference: the manager's in config/manager and the CSV, and
// the domain hook's default in the operator.
func TestImagesAreNamedOnce(t *testing.T) {
	mk := read(t, "Makefile")
	vars := map[string]string{}
	for _, name := range []string{"VERSION", "IMAGE_REGISTRY"} {
		m := regexp.MustCompile(`(?m)^` + name + ` \?= (\S+)$`).FindStringSubmatch(mk)
		if m == nil {
			t.Fatalf("the Makefile sets no %s", name)
		}
		vars[name] = m[1]
	}
	manager := vars["IMAGE_REGISTRY"] + "/macvirt-manager:v" + vars["VERSION"]
	hook := vars["IMAGE_REGISTRY"] + "/macvirt-domain-hook:v" + vars["VERSION"]
	if install.DefaultImage != hook {
		t.Errorf("install.DefaultImage is %s, the Makefile's HOOK_IMG %s", install.DefaultImage, hook)
	}
	csv := loadBundle(t).CSV
	if csv.Annotations["containerImage"] != manager {
		t.Errorf("containerImage %s, want %s", csv.Annotations["containerImage"], manager)
	}
	if csv.Spec.Version.String() != vars["VERSION"] || csv.Name != "macvirt.v"+vars["VERSION"] {
		t.Errorf("CSV %s version %s, the Makefile says %s", csv.Name, csv.Spec.Version.String(), vars["VERSION"])
	}
	// One hook image per KubeVirt minor of KUBEVIRT_HOOK_VERSIONS, as the
	// operator knows them.
	kubevirt := regexp.MustCompile(`(?m)^KUBEVIRT_VERSION \?= v(\d+\.\d+)\.\d+$`).FindStringSubmatch(mk)
	hookVersions := regexp.MustCompile(`(?m)^KUBEVIRT_HOOK_VERSIONS \?= (.+)$`).FindStringSubmatch(mk)
	if kubevirt == nil || hookVersions == nil {
		t.Fatal("the Makefile sets no KUBEVIRT_VERSION v<x.y.z> or KUBEVIRT_HOOK_VERSIONS")
	}
	if install.KubeVirtMinor != kubevirt[1] {
		t.Errorf("install.KubeVirtMinor is %s, the Makefile's KUBEVIRT_VERSION's minor %s", install.KubeVirtMinor, kubevirt[1])
	}
	var minors []string
	for _, v := range strings.Fields(strings.ReplaceAll(hookVersions[1], "$(KUBEVIRT_VERSION)", "v"+kubevirt[1]+".0")) {
		minors = append(minors, strings.Join(strings.Split(strings.TrimPrefix(v, "v"), ".")[:2], "."))
	}
	if got := strings.Join(minors, ","); install.KubeVirtMinors != got {
		t.Errorf("install.KubeVirtMinors is %s, the Makefile's KUBEVIRT_HOOK_VERSIONS give %s", install.KubeVirtMinors, got)
	}
	want := []string{manager, hook}
	wantEnv := map[string]string{install.RelatedImageEnv: hook}
	for _, m := range minors {
		if m != install.KubeVirtMinor {
			want = append(want, install.ImageTagFor(hook, m))
			wantEnv[install.RelatedImageEnvFor(m)] = install.ImageTagFor(hook, m)
		}
	}
	var related []string
	for _, r := range csv.Spec.RelatedImages {
		related = append(related, r.Image)
	}
	if !slices.Equal(related, want) {
		t.Errorf("relatedImages %v, want %v", related, want)
	}
	// The manager finds each hook image in the environment, by the same
	// reference as relatedImages (which a mirror rewrites), and is given
	// no --hook-image, which would win over them.
	gotEnv := map[string]string{}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "RELATED_IMAGE_") {
					gotEnv[e.Name] = e.Value
				}
			}
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--hook-image") {
					t.Errorf("container %s has %s, which would override the hook image of the cluster's KubeVirt", c.Name, a)
				}
			}
		}
	}
	if !maps.Equal(gotEnv, wantEnv) {
		t.Errorf("the manager's RELATED_IMAGE_* variables are %v, want %v", gotEnv, wantEnv)
	}
	if k := read(t, "config/manager/kustomization.yaml"); !strings.Contains(k, "newName: "+strings.Split(manager, ":")[0]) ||
		!strings.Contains(k, "newTag: v"+vars["VERSION"]) {
		t.Errorf("config/manager/kustomization.yaml does not set the image to %s (run make bundle)", manager)
	}
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name)) //nolint:gosec // repository files.
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kustomize builds a config/ directory with the Makefile's kustomize.
func kustomize(t *testing.T, dir string) []unstructured.Unstructured {
	t.Helper()
	out, err := cluster.KustomizeBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	return splitYAML(t, string(out))
}

// TestRestrictedPodSecurity evaluates the manager's pod, as kustomize and
// as OLM install it, with the Pod Security admission's own checks.
func TestRestrictedPodSecurity(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	pods := map[string]corev1.PodTemplateSpec{"OLM bundle": loadBundle(t).CSV.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template}
	for _, u := range kustomize(t, "config/default") {
		if u.GetKind() != "Deployment" {
			continue
		}
		var dep struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		data, _ := json.Marshal(u.Object)
		if err := json.Unmarshal(data, &dep); err != nil {
			t.Fatal(err)
		}
		pods["config/default "+u.GetName()] = dep.Spec.Template
	}
	if len(pods) != 2 {
		t.Fatalf("found %d manager pods, want the bundle's and config/default's", len(pods))
	}
	for name, tmpl := range pods {
		result := policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &tmpl.ObjectMeta, &tmpl.Spec))
		if !result.Allowed {
			t.Errorf("%s: not Restricted: %s", name, result.ForbiddenDetail())
		}
		for _, c := range tmpl.Spec.Containers {
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() ||
				c.Resources.Limits.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: container %s lacks CPU or memory requests or limits", name, c.Name)
			}
		}
	}
	// The check can fail: a privileged container is refused.
	olm := pods["OLM bundle"]
	bad := olm.DeepCopy()
	yes := true
	bad.Spec.Containers[0].SecurityContext.Privileged = &yes
	if policy.AggregateCheckResults(evaluator.EvaluatePod(restricted, &bad.ObjectMeta, &bad.Spec)).Allowed {
		t.Error("a privileged manager passed the Restricted profile")
	}
}

// TestKustomizeInstall: config/default is the whole operator, leader
// election on, with the aggregated roles tenants are granted.
func TestKustomizeInstall(t *testing.T) {
	objs := kustomize(t, "config/default")
	got := map[string]unstructured.Unstructured{}
	for _, u := range objs {
		got[u.GetKind()+"/"+u.GetName()] = u
	}
	for _, want := range []string{"Namespace/macvirt-system", "Deployment/macvirt-controller-manager",
		"Service/macvirt-webhook-service", "Service/macvirt-agent", "Service/macvirt-controller-manager-metrics-service",
		"Certificate/macvirt-serving-cert", "MutatingWebhookConfiguration/macvirt-mutating-webhook-configuration",
		"ValidatingWebhookConfiguration/macvirt-validating-webhook-configuration",
		"ClusterRole/macvirt-claim-editor", "ClusterRole/macvirt-viewer", "ClusterRole/macvirt-catalog-viewer",
		"ClusterRole/macvirt-fleeting-plugin",
		"CustomResourceDefinition/macclasses.macvirt.io", "CustomResourceDefinition/macpools.macvirt.io",
		"CustomResourceDefinition/macclaims.macvirt.io", "CustomResourceDefinition/macmachines.macvirt.io"} {
		if _, ok := got[want]; !ok {
			t.Errorf("config/default lacks %s", want)
		}
	}
	agg := func(name string) map[string]string { u := got["ClusterRole/"+name]; return u.GetLabels() }
	const to = "rbac.authorization.k8s.io/aggregate-to-"
	if l := agg("macvirt-claim-editor"); l[to+"edit"] != "true" || l[to+"admin"] != "true" || l[to+"view"] != "" {
		t.Errorf("macvirt-claim-editor aggregates as %v; want edit and admin only", l)
	}
	if l := agg("macvirt-fleeting-plugin"); l[to+"edit"] != "" || l[to+"admin"] != "" || l[to+"view"] != "" {
		t.Errorf("macvirt-fleeting-plugin aggregates as %v; want it bound to the runner's identity alone", l)
	}
	for _, name := range []string{"macvirt-viewer", "macvirt-catalog-viewer"} {
		if l := agg(name); l[to+"view"] != "true" {
			t.Errorf("%s aggregates as %v; want view", name, l)
		}
	}
	// The serving certificate comes from a CA that outlives its renewals,
	// so agents' config disks keep verifying the endpoint.
	serving := got["Certificate/macvirt-serving-cert"]
	issuer, _, _ := unstructured.NestedString(serving.Object, "spec", "issuerRef", "name")
	caSecret, _, _ := unstructured.NestedString(got["Issuer/"+issuer].Object, "spec", "ca", "secretName")
	ca := got["Certificate/macvirt-ca"]
	isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA")
	caSecretOfCA, _, _ := unstructured.NestedString(ca.Object, "spec", "secretName")
	if caSecret == "" || !isCA || caSecretOfCA != caSecret {
		t.Errorf("the serving certificate's issuer %q is not a CA issuer backed by the isCA Certificate macvirt-ca", issuer)
	}
	if ns := got["Namespace/macvirt-system"]; ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace macvirt-system does not enforce the Restricted profile: %v", ns.GetLabels())
	}
	dep := got["Deployment/macvirt-controller-manager"]
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if !slices.Contains(args, "--leader-elect") {
		t.Errorf("manager args %v: leader election is off", args)
	}
	// The optional NetworkPolicies still let the API server reach the
	// webhooks and guest agents reach their endpoint.
	open := map[float64]bool{}
	for _, np := range kustomize(t, "config/network-policy") {
		rules, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
		for _, r := range rules {
			rule := r.(map[string]any)
			if _, restricted := rule["from"]; restricted {
				continue
			}
			ports, _, _ := unstructured.NestedSlice(rule, "ports")
			for _, p := range ports {
				if port, ok := p.(map[string]any)["port"].(float64); ok {
					open[port] = true
				}
			}
		}
	}
	if !open[9443] || !open[9444] {
		t.Errorf("config/network-policy opens %v to everyone; the webhooks (9443) and the agent endpoint (9444) need it", open)
	}
	// kustomize can build every overlay users are pointed at.
	for _, dir := range []string{"config/manifests", "config/samples", "config/network-policy"} {
		if len(kustomize(t, dir)) == 0 {
			t.Errorf("kustomize build %s produced nothing", dir)
		}
	}
}

// TestDockerfiles: the manager image is a static binary on distroless,
// running as nonroot; the hook image is KubeVirt's sidecar-shim of the
// KubeVirt version macvirt builds against, with the hook as onDefineDomain.
func TestDockerfiles(t *testing.T) {
	manager := read(t, "Dockerfile")
	for _, want := range []string{"CGO_ENABLED=0", "FROM gcr.io/distroless/static:nonroot", "USER 65532:65532", `ENTRYPOINT ["/manager"]`} {
		if !strings.Contains(manager, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	kubevirt := regexp.MustCompile(`(?m)^\s*kubevirt\.io/api (v\S+)$`).FindStringSubmatch(read(t, "go.mod"))
	if kubevirt == nil {
		t.Fatal("go.mod requires no kubevirt.io/api")
	}
	hook := read(t, "Dockerfile.hook")
	for _, want := range []string{"quay.io/kubevirt/sidecar-shim:" + kubevirt[1], "CGO_ENABLED=0", "/usr/bin/onDefineDomain", "./cmd/domain-hook"} {
		if !strings.Contains(hook, want) {
			t.Errorf("Dockerfile.hook lacks %q", want)
		}
	}
	if !strings.Contains(manager, "ARG HOOK_IMG") || !strings.Contains(manager, "internal/domainhook/install.DefaultImage=${HOOK_IMG}") {
		t.Error("Dockerfile does not build HOOK_IMG in as the manager's default hook image")
	}
	mk := read(t, "Makefile")
	for _, want := range []string{"KUBEVIRT_VERSION ?= " + kubevirt[1], "internal/domainhook/install.DefaultImage=$(HOOK_IMG)",
		"build --build-arg HOOK_IMG=$(HOOK_IMG) -t $(IMG) .",
		"build --build-arg SIDECAR_SHIM_IMAGE=quay.io/kubevirt/sidecar-shim:$(KUBEVIRT_VERSION) -f Dockerfile.hook -t $(HOOK_IMG) .",
		"build -f bundle.Dockerfile -t $(BUNDLE_IMG) .", `go build -ldflags "$(GO_LDFLAGS)" -o bin/manager ./cmd`} {
		if !strings.Contains(mk, want) {
			t.Errorf("the Makefile does not %q", want)
		}
	}
	// bundle.Dockerfile copies bundle/ from the repository root, which
	// .dockerignore otherwise leaves out of the build context.
	if ignore := read(t, ".dockerignore"); !strings.Contains(ignore, "\n!bundle/**\n") {
		t.Error(".dockerignore keeps bundle/ out of the build context, so bundle.Dockerfile's COPY fails")
	}
}

// TestPlatformsAndKubernetesVersion holds the CSV to what the operator
// needs and is built for: minKubeVersion is at least the release that
// serves every CRD feature the bundle uses (selectableFields is on by
// default from 1.31), and the arch and os labels OperatorHub filters on
// name the platforms the manager's image is built for.
func TestPlatformsAndKubernetesVersion(t *testing.T) {
	b := loadBundle(t)
	minor := func(v string) int {
		parts := strings.Split(v, ".")
		if len(parts) < 2 {
			t.Fatalf("version %q is not major.minor", v)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || parts[0] != "1" {
			t.Fatalf("version %q is not 1.<minor>", v)
		}
		return n
	}
	need, why := 0, ""
	for _, crd := range b.V1CRDs {
		for _, v := range crd.Spec.Versions {
			if len(v.SelectableFields) > 0 && need < 31 {
				need, why = 31, crd.Name+" uses selectableFields"
			}
		}
	}
	if got := minor(b.CSV.Spec.MinKubeVersion); got < need {
		t.Errorf("minKubeVersion %s, but %s (Kubernetes 1.%d)", b.CSV.Spec.MinKubeVersion, why, need)
	}
	// The images are built for the Makefile's PLATFORMS; the CSV says the
	// same, and nothing more.
	m := regexp.MustCompile(`(?m)^PLATFORMS \?= (\S+)$`).FindStringSubmatch(read(t, "Makefile"))
	if m == nil {
		t.Fatal("the Makefile sets no PLATFORMS")
	}
	want := map[string]string{}
	for _, p := range strings.Split(m[1], ",") {
		os, arch, _ := strings.Cut(p, "/")
		want["operatorframework.io/os."+os] = "supported"
		want["operatorframework.io/arch."+arch] = "supported"
	}
	got := map[string]string{}
	for k, v := range b.CSV.Labels {
		if strings.HasPrefix(k, "operatorframework.io/os.") || strings.HasPrefix(k, "operatorframework.io/arch.") {
			got[k] = v
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the CSV's platform labels are %v; the images are built for %s: %v", got, m[1], want)
	}
}

// TestUpgradeGraph: OLM can upgrade to this bundle from every release the
// upgrade test starts from (test/upgrade/testdata/v<version>), and from
// nothing newer: olm.skipRange covers each older release and not this one,
// and spec.replaces, when set, names an older release.
func TestUpgradeGraph(t *testing.T) {
	csv := loadBundle(t).CSV
	self := csv.Spec.Version.Version
	raw, ok := csv.Annotations["olm.skipRange"]
	if !ok {
		t.Fatal("the CSV has no olm.skipRange: OLM could upgrade only along spec.replaces")
	}
	skips, err := semver.ParseRange(raw)
	if err != nil {
		t.Fatalf("olm.skipRange %q: %v", raw, err)
	}
	if skips(self) {
		t.Errorf("olm.skipRange %q includes the bundle's own version %s", raw, self)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "test", "upgrade", "testdata", "v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no upgrade baselines under test/upgrade/testdata (%v)", err)
	}
	older := 0
	for _, d := range dirs {
		v, err := semver.ParseTolerant(filepath.Base(d))
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		switch {
		case v.GT(self):
			t.Errorf("the baseline %s is newer than the bundle's version %s", v, self)
		case v.LT(self):
			older++
			if !skips(v) {
				t.Errorf("olm.skipRange %q leaves out the release %s the upgrade test starts from", raw, v)
			}
		}
	}
	if r := csv.Spec.Replaces; r != "" {
		v, err := semver.ParseTolerant(strings.TrimPrefix(r, "macvirt.v"))
		if err != nil || !strings.HasPrefix(r, "macvirt.v") || !v.LT(self) {
			t.Errorf("spec.replaces %q is not an older release of the package", r)
		}
	}
	t.Logf("version %s, olm.skipRange %q, replaces %q, %d older releases", self, raw, csv.Spec.Replaces, older)
}

// TestMonitoringShipsBothWays: the Prometheus component (the ServiceMonitor
// and the alerts) builds into config/default when its lines there are
// uncommented, as docs/install.md says, and the ServiceMonitor selects the
// metrics Service. The OLM bundle carries neither object (OLM fails a
// whole install whose bundle has a kind the cluster does not serve): its
// operator writes the same two itself (--monitoring-objects), with the
// permission to.
func TestMonitoringShipsBothWays(t *testing.T) {
	rules := splitYAML(t, read(t, "config/prometheus/rules.yaml"))
	if len(rules) != 1 {
		t.Fatalf("config/prometheus/rules.yaml holds %d objects, want the PrometheusRule", len(rules))
	}

	// config/default with the component, in a copy of config/.
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "config"), os.DirFS(filepath.Join(root, "config"))); err != nil {
		t.Fatal(err)
	}
	k := filepath.Join(dir, "config", "default", "kustomization.yaml")
	b, err := os.ReadFile(k) //nolint:gosec // the copy just made.
	if err != nil {
		t.Fatal(err)
	}
	enabled := strings.Replace(strings.Replace(string(b), "#components:\n", "components:\n", 1), "#- ../prometheus\n", "- ../prometheus\n", 1)
	if enabled == string(b) || !strings.Contains(enabled, "components:\n- ../prometheus\n") {
		t.Fatal("config/default/kustomization.yaml has no commented `#components:` / `#- ../prometheus` to uncomment")
	}
	if err := os.WriteFile(k, []byte(enabled), 0o600); err != nil { //nolint:gosec // the copy in t.TempDir().
		t.Fatal(err)
	}
	byKind := map[string][]unstructured.Unstructured{}
	for _, o := range kustomize(t, filepath.Join(dir, "config", "default")) {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
	}
	if len(byKind["PrometheusRule"]) != 1 || len(byKind["ServiceMonitor"]) != 1 {
		t.Fatalf("config/default with the component: %d PrometheusRules and %d ServiceMonitors, want one each",
			len(byKind["PrometheusRule"]), len(byKind["ServiceMonitor"]))
	}
	rule, monitor := byKind["PrometheusRule"][0], byKind["ServiceMonitor"][0]
	if !equality.Semantic.DeepEqual(rule.Object["spec"], rules[0].Object["spec"]) {
		t.Error("config/default's PrometheusRule differs from config/prometheus/rules.yaml")
	}
	selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	port := ""
	if len(endpoints) == 1 {
		port, _, _ = unstructured.NestedString(endpoints[0].(map[string]any), "port")
	}
	selected := 0
	for _, svc := range byKind["Service"] {
		if !labels.SelectorFromSet(selector).Matches(labels.Set(svc.GetLabels())) {
			continue
		}
		selected++
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if !slices.ContainsFunc(ports, func(p any) bool { m, _ := p.(map[string]any); return m["name"] == port }) {
			t.Errorf("the ServiceMonitor scrapes port %q, which Service %s does not name", port, svc.GetName())
		}
	}
	if selected != 1 {
		t.Errorf("the ServiceMonitor's selector %v matches %d Services, want the metrics Service", selector, selected)
	}

	// What the OLM install's operator writes is the same two objects.
	written, err := monitoring.Objects(rule.GetNamespace())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range written {
		var same *unstructured.Unstructured
		for _, o := range []*unstructured.Unstructured{&rule, &monitor} {
			if o.GetKind() == w.GetKind() && o.GetName() == w.GetName() && o.GetNamespace() == w.GetNamespace() {
				same = o
			}
		}
		if same == nil || !equality.Semantic.DeepEqual(same.Object["spec"], w.Object["spec"]) {
			t.Errorf("the operator writes %s %s/%s, which config/default does not have as such", w.GetKind(), w.GetNamespace(), w.GetName())
		}
	}

	// The bundle: none of them, the flag, and the permission.
	bundle := loadBundle(t)
	for _, o := range bundle.Objects {
		if o.GetObjectKind().GroupVersionKind().Group == "monitoring.coreos.com" {
			t.Errorf("the bundle carries %s; OLM would fail to install it where the Prometheus Operator is missing", o.GetObjectKind().GroupVersionKind().Kind)
		}
	}
	csv := bundle.CSV
	args := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--monitoring-objects") {
		t.Errorf("the CSV's manager runs without --monitoring-objects: %v", args)
	}
	may := map[string]bool{}
	for _, p := range csv.Spec.InstallStrategy.StrategySpec.Permissions {
		for _, r := range p.Rules {
			if slices.Contains(r.APIGroups, "monitoring.coreos.com") {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						may[res+" "+v] = true
					}
				}
			}
		}
	}
	for _, want := range []string{"servicemonitors create", "servicemonitors patch", "prometheusrules create", "prometheusrules patch"} {
		if !may[want] {
			t.Errorf("the CSV's namespaced permissions lack %s on monitoring.coreos.com", want)
		}
	}
}
