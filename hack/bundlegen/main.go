// Command bundlegen turns `kustomize build config/manifests` into macvirt's
// OLM bundle: bundle/manifests (the ClusterServiceVersion, the CRDs and the
// other objects OLM installs as they are), bundle/metadata/annotations.yaml
// and bundle.Dockerfile.
//
// The CSV base in the stream carries what people maintain; everything that
// can be derived is derived here, so the bundle never drifts from config/:
// the Deployment and the RBAC bound to its ServiceAccount become the install
// strategy, webhook configurations become webhook definitions (OLM issues
// their certificate and Service itself), and macvirt.io objects become
// alm-examples.
//
//	kustomize build config/manifests | go run ./hack/bundlegen --version 0.1.0 ...
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/macvirt/macvirt/internal/domainhook/install"
)

// apiServiceCertDir is where OLM mounts the serving certificate of an
// APIService it owns (apiserver.crt, apiserver.key), and authNamespace
// where the API server's front-proxy trust is, whose reader OLM binds the
// operator to for it.
const (
	apiServiceCertDir = "/apiserver.local.config/certificates"
	authNamespace     = "kube-system"
)

// webhookCertDir is where OLM mounts the webhook serving certificate; the
// manager's --webhook-cert-path points there in every install.
const webhookCertDir = "/tmp/k8s-webhook-server/serving-certs"

type options struct {
	Version   string
	Image     string
	HookImage string
	// HookImagesByKubeVirt are the hook images of the other KubeVirt
	// minors, as "<minor>=<image>" separated by spaces or commas.
	HookImagesByKubeVirt string
	Replaces             string
	SkipRange            string
	Package              string
	Channels             string
	DefaultChannel       string
	Icon                 string
	OutDir               string
	Dockerfile           string
	// CatalogTemplate, when set, is where to write an opm basic catalog
	// template of BundleImage, instead of the bundle.
	CatalogTemplate string
	BundleImage     string
}

func main() {
	var o options
	flag.StringVar(&o.Version, "version", "", "The operator version (semver, no leading v).")
	flag.StringVar(&o.Image, "image", "", "The manager image.")
	flag.StringVar(&o.HookImage, "hook-image", "", "The domain-hook sidecar image for the KubeVirt minor macvirt is built against.")
	flag.StringVar(&o.HookImagesByKubeVirt, "hook-images-by-kubevirt", "", `The domain-hook images of the other KubeVirt minors: "1.8=<image> 1.7=<image>".`)
	flag.StringVar(&o.Replaces, "replaces", "", "The CSV this one replaces in its channel (macvirt.v<version>); none when empty.")
	flag.StringVar(&o.SkipRange, "skip-range", "", `The olm.skipRange annotation: the versions OLM may upgrade from directly, e.g. "<0.2.0".`)
	flag.StringVar(&o.Package, "package", "macvirt", "The OLM package name.")
	flag.StringVar(&o.Channels, "channels", "alpha", "Comma-separated channels of the bundle.")
	flag.StringVar(&o.DefaultChannel, "default-channel", "alpha", "The package's default channel.")
	flag.StringVar(&o.Icon, "icon", "config/manifests/icon.svg", "The SVG icon of the CSV.")
	flag.StringVar(&o.OutDir, "out", "bundle", "The bundle directory (manifests/ and metadata/ are replaced).")
	flag.StringVar(&o.Dockerfile, "dockerfile", "bundle.Dockerfile", "Where to write the bundle image's Dockerfile.")
	flag.StringVar(&o.CatalogTemplate, "catalog-template", "", "Write an opm basic catalog template of --bundle-image to this file instead of the bundle.")
	flag.StringVar(&o.BundleImage, "bundle-image", "", "With --catalog-template: the bundle image (by digest in a release).")
	flag.Parse()
	if err := run(os.Stdin, o); err != nil {
		fmt.Fprintln(os.Stderr, "bundlegen:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, o options) error {
	if _, err := semver.Parse(o.Version); err != nil {
		return fmt.Errorf("--version %q: %w", o.Version, err)
	}
	if err := o.checkUpgradeGraph(); err != nil {
		return err
	}
	if o.CatalogTemplate != "" {
		b, err := catalogTemplate(o)
		if err != nil {
			return err
		}
		return os.WriteFile(o.CatalogTemplate, b, 0o644)
	}
	if o.Image == "" || o.HookImage == "" {
		return errors.New("--image and --hook-image are required")
	}
	if _, err := o.hookImagesByKubeVirt(); err != nil {
		return err
	}
	return runBundle(in, o)
}

// checkUpgradeGraph checks --skip-range and --replaces against --version.
func (o options) checkUpgradeGraph() error {
	if o.SkipRange != "" {
		r, err := semver.ParseRange(o.SkipRange)
		if err != nil {
			return fmt.Errorf("--skip-range %q: %w", o.SkipRange, err)
		}
		if r(semver.MustParse(o.Version)) {
			return fmt.Errorf("--skip-range %q includes --version %s itself; it names the versions this one upgrades from", o.SkipRange, o.Version)
		}
	}
	if o.Replaces != "" && !strings.HasPrefix(o.Replaces, o.Package+".v") {
		return fmt.Errorf("--replaces %q is not a CSV name of package %s (%s.v<version>)", o.Replaces, o.Package, o.Package)
	}
	return nil
}

// catalogTemplate is opm's basic catalog template (schema
// olm.template.basic) of one bundle in the default channel, with its place
// in the upgrade graph; `opm alpha render-template basic` turns it into a
// file-based catalog.
func catalogTemplate(o options) ([]byte, error) {
	if o.BundleImage == "" {
		return nil, errors.New("--catalog-template needs --bundle-image")
	}
	entry := map[string]any{"name": o.Package + ".v" + o.Version}
	if o.Replaces != "" {
		entry["replaces"] = o.Replaces
	}
	if o.SkipRange != "" {
		entry["skipRange"] = o.SkipRange
	}
	return yaml.Marshal(map[string]any{
		"schema": "olm.template.basic",
		"entries": []any{
			map[string]any{"schema": "olm.package", "name": o.Package, "defaultChannel": o.DefaultChannel},
			map[string]any{"schema": "olm.channel", "package": o.Package, "name": o.DefaultChannel, "entries": []any{entry}},
			map[string]any{"schema": "olm.bundle", "image": o.BundleImage},
		},
	})
}

func runBundle(in io.Reader, o options) error {
	objs, err := decodeAll(in)
	if err != nil {
		return err
	}
	icon, err := os.ReadFile(o.Icon)
	if err != nil {
		return err
	}
	b, err := build(objs, o, icon)
	if err != nil {
		return err
	}
	return b.write(o)
}

func decodeAll(in io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding the kustomize output: %w", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// bundle is what gets written: the CSV, then every other manifest by file name.
type bundle struct {
	csv   *operatorsv1alpha1.ClusterServiceVersion
	files map[string]any
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
		return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// build sorts the stream into the CSV and the bundle's other manifests.
func build(objs []*unstructured.Unstructured, o options, icon []byte) (*bundle, error) {
	b := &bundle{files: map[string]any{}}
	var (
		deployments                     []appsv1.Deployment
		crds                            []apiextensionsv1.CustomResourceDefinition
		examples                        []map[string]any
		clusterRoles, roles             = map[string]*rbacv1.ClusterRole{}, map[string]*rbacv1.Role{}
		clusterBindings, roleBindings   []rbacv1.RoleBinding
		webhooks                        []operatorsv1alpha1.WebhookDescription
		webhookServices                 = map[string]bool{}
		services, serviceAccounts, rest []*unstructured.Unstructured
		apiServices                     []*unstructured.Unstructured
	)
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		switch {
		case gvk.Kind == "ClusterServiceVersion":
			if b.csv != nil {
				return nil, errors.New("more than one ClusterServiceVersion base")
			}
			b.csv = &operatorsv1alpha1.ClusterServiceVersion{}
			if err := fromUnstructured(u, b.csv); err != nil {
				return nil, err
			}
		case gvk.Group == "macvirt.io":
			examples = append(examples, u.Object)
		case gvk.Group == "cert-manager.io", gvk.Kind == "Namespace":
			// OLM issues webhook certificates and owns the install namespace.
		case gvk.Kind == "ValidatingAdmissionPolicy", gvk.Kind == "ValidatingAdmissionPolicyBinding":
			// A bundle cannot carry admission policies; the host agents'
			// one is applied by hand (docs/apple-silicon-hosts.md).
		case gvk.Kind == "CustomResourceDefinition":
			var crd apiextensionsv1.CustomResourceDefinition
			if err := fromUnstructured(u, &crd); err != nil {
				return nil, err
			}
			crds = append(crds, crd)
		case gvk.Kind == "Deployment":
			var d appsv1.Deployment
			if err := fromUnstructured(u, &d); err != nil {
				return nil, err
			}
			deployments = append(deployments, d)
		case gvk.Kind == "ClusterRole":
			var r rbacv1.ClusterRole
			if err := fromUnstructured(u, &r); err != nil {
				return nil, err
			}
			clusterRoles[r.Name] = &r
		case gvk.Kind == "Role":
			var r rbacv1.Role
			if err := fromUnstructured(u, &r); err != nil {
				return nil, err
			}
			roles[r.Name] = &r
		case gvk.Kind == "ClusterRoleBinding", gvk.Kind == "RoleBinding":
			var rb rbacv1.RoleBinding
			if err := fromUnstructured(u, &rb); err != nil {
				return nil, err
			}
			if gvk.Kind == "ClusterRoleBinding" {
				clusterBindings = append(clusterBindings, rb)
			} else {
				roleBindings = append(roleBindings, rb)
			}
		case gvk.Kind == "MutatingWebhookConfiguration", gvk.Kind == "ValidatingWebhookConfiguration":
			ws, svcs, err := webhookDefinitions(u)
			if err != nil {
				return nil, err
			}
			webhooks = append(webhooks, ws...)
			for _, s := range svcs {
				webhookServices[s] = true
			}
		case gvk.Kind == "APIService":
			apiServices = append(apiServices, u)
		case gvk.Kind == "Service":
			services = append(services, u)
		case gvk.Kind == "ServiceAccount":
			serviceAccounts = append(serviceAccounts, u)
		default:
			rest = append(rest, u)
		}
	}
	if b.csv == nil {
		return nil, errors.New("no ClusterServiceVersion base in the input")
	}
	if len(deployments) != 1 {
		return nil, fmt.Errorf("want exactly one Deployment, found %d", len(deployments))
	}
	dep := deployments[0]
	sa := dep.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		return nil, fmt.Errorf("the Deployment %s names no serviceAccountName", dep.Name)
	}
	for _, u := range serviceAccounts {
		if u.GetName() != sa {
			rest = append(rest, u)
		}
	}
	owned, apiServiceServices, err := apiServiceDefinitions(b.csv.Spec.APIServiceDefinitions.Owned, apiServices, services, dep)
	if err != nil {
		return nil, err
	}
	for _, u := range services {
		if !webhookServices[u.GetName()] && !apiServiceServices[u.GetName()] {
			rest = append(rest, u)
		}
	}
	if len(owned) > 0 {
		// OLM binds the operator to the API server's front-proxy trust
		// (the Role extension-apiserver-authentication-reader in
		// kube-system) for the APIServices it owns; a bundle cannot hold a
		// Role or a RoleBinding of another namespace.
		roleBindings = slices.DeleteFunc(roleBindings, func(rb rbacv1.RoleBinding) bool { return rb.Namespace == authNamespace })
		maps.DeleteFunc(roles, func(_ string, r *rbacv1.Role) bool { return r.Namespace == authNamespace })
	}

	perms, clusterPerms, boundRoles, boundClusterRoles, err := permissions(sa, roles, clusterRoles, roleBindings, clusterBindings)
	if err != nil {
		return nil, err
	}
	for name, r := range clusterRoles {
		if !boundClusterRoles[name] {
			b.add(r.Name, "rbac.authorization.k8s.io", "v1", "ClusterRole", r)
		}
	}
	for name, r := range roles {
		if !boundRoles[name] {
			r.Namespace = ""
			b.add(r.Name, "rbac.authorization.k8s.io", "v1", "Role", r)
		}
	}
	for _, u := range rest {
		u.SetNamespace("")
		gvk := u.GroupVersionKind()
		b.add(u.GetName(), gvk.Group, gvk.Version, gvk.Kind, u.Object)
	}

	manager, err := olmDeployment(dep, o, len(owned) > 0)
	if err != nil {
		return nil, err
	}
	for i := range owned {
		owned[i].DeploymentName = manager.Name
	}
	b.csv.Spec.APIServiceDefinitions.Owned = owned
	for i := range webhooks {
		webhooks[i].DeploymentName = manager.Name
	}
	for i := range crds {
		crds[i].Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		b.files[crds[i].Spec.Group+"_"+crds[i].Spec.Names.Plural+".yaml"] = typed(&crds[i],
			apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition")
	}
	if err := completeCSV(b.csv, o, icon, manager, perms, clusterPerms, webhooks, crds, examples); err != nil {
		return nil, err
	}
	return b, nil
}

// typed sets apiVersion and kind, which typed objects leave empty.
func typed(obj runtime.Object, apiVersion, kind string) runtime.Object {
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
	return obj
}

// add records a manifest under operator-sdk's file naming:
// <name>_<group>_<version>_<kind>.yaml, group omitted for the core group.
func (b *bundle) add(name, group, ver, kind string, obj any) {
	parts := []string{name}
	if group != "" {
		parts = append(parts, group)
	}
	parts = append(parts, ver, strings.ToLower(kind))
	if m, ok := obj.(runtime.Object); ok {
		apiVersion := ver
		if group != "" {
			apiVersion = group + "/" + ver
		}
		typed(m, apiVersion, kind)
	}
	b.files[strings.Join(parts, "_")+".yaml"] = obj
}

// permissions turns the RBAC bound to the manager's ServiceAccount into the
// CSV's permissions (namespaced, from RoleBindings) and clusterPermissions
// (from ClusterRoleBindings). It returns which roles were used, so they are
// not installed a second time.
func permissions(sa string, roles map[string]*rbacv1.Role, clusterRoles map[string]*rbacv1.ClusterRole,
	roleBindings, clusterBindings []rbacv1.RoleBinding) (
	perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions, boundRoles, boundClusterRoles map[string]bool, err error) {
	boundRoles, boundClusterRoles = map[string]bool{}, map[string]bool{}
	bindsSA := func(rb rbacv1.RoleBinding) bool {
		return slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa
		})
	}
	var nsRules, clusterRules []rbacv1.PolicyRule
	for _, rb := range clusterBindings {
		if !bindsSA(rb) {
			continue
		}
		r, ok := clusterRoles[rb.RoleRef.Name]
		if !ok {
			return nil, nil, nil, nil, fmt.Errorf("ClusterRoleBinding %s refers to ClusterRole %s, which is not in the input", rb.Name, rb.RoleRef.Name)
		}
		boundClusterRoles[r.Name] = true
		clusterRules = append(clusterRules, r.Rules...)
	}
	for _, rb := range roleBindings {
		if !bindsSA(rb) {
			continue
		}
		switch rb.RoleRef.Kind {
		case "Role":
			r, ok := roles[rb.RoleRef.Name]
			if !ok {
				return nil, nil, nil, nil, fmt.Errorf("RoleBinding %s refers to Role %s, which is not in the input", rb.Name, rb.RoleRef.Name)
			}
			boundRoles[r.Name] = true
			nsRules = append(nsRules, r.Rules...)
		case "ClusterRole":
			r, ok := clusterRoles[rb.RoleRef.Name]
			if !ok {
				return nil, nil, nil, nil, fmt.Errorf("RoleBinding %s refers to ClusterRole %s, which is not in the input", rb.Name, rb.RoleRef.Name)
			}
			nsRules = append(nsRules, r.Rules...)
		}
	}
	if len(nsRules) > 0 {
		perms = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa, Rules: nsRules}}
	}
	if len(clusterRules) > 0 {
		clusterPerms = []operatorsv1alpha1.StrategyDeploymentPermissions{{ServiceAccountName: sa, Rules: clusterRules}}
	}
	return perms, clusterPerms, boundRoles, boundClusterRoles, nil
}

// olmDeployment is the manager Deployment as OLM should create it: the
// released images, and no volume for the webhook certificate, which OLM
// mounts itself at the same path.
func olmDeployment(d appsv1.Deployment, o options, apiService bool) (operatorsv1alpha1.StrategyDeploymentSpec, error) {
	spec := d.Spec.DeepCopy()
	pod := &spec.Template.Spec
	dropped := map[string]bool{}
	found := false
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Name != "manager" {
			continue
		}
		found = true
		c.Image = o.Image
		// The hook images as RELATED_IMAGE_* variables, which a mirror
		// for a disconnected cluster rewrites with relatedImages; the
		// operator picks the one of the cluster's KubeVirt minor.
		env, err := o.hookImageEnv()
		if err != nil {
			return operatorsv1alpha1.StrategyDeploymentSpec{}, err
		}
		c.Env = append(c.Env, env...)
		// The operator writes its ServiceMonitor and alerts where the
		// cluster serves their kinds: in the bundle they would fail the
		// install everywhere else.
		c.Args = append(c.Args, "--monitoring-objects")
		if apiService {
			// OLM mounts an owned APIService's serving certificate
			// there, as apiserver.crt and apiserver.key.
			c.Args = append(c.Args, "--tunnel-cert-path="+apiServiceCertDir)
		}
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			if m.MountPath == webhookCertDir {
				dropped[m.Name] = true
				return true
			}
			return false
		})
	}
	if !found {
		return operatorsv1alpha1.StrategyDeploymentSpec{}, fmt.Errorf("the Deployment %s has no container named manager", d.Name)
	}
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return dropped[v.Name] })
	return operatorsv1alpha1.StrategyDeploymentSpec{Name: d.Name, Spec: *spec, Label: d.Labels}, nil
}

// webhookDefinitions converts a webhook configuration made for a Service
// into OLM webhook definitions, and returns the Services it pointed at.
func webhookDefinitions(u *unstructured.Unstructured) ([]operatorsv1alpha1.WebhookDescription, []string, error) {
	type hook struct {
		typ      operatorsv1alpha1.WebhookAdmissionType
		name     string
		client   admissionregistrationv1.WebhookClientConfig
		rules    []admissionregistrationv1.RuleWithOperations
		failure  *admissionregistrationv1.FailurePolicyType
		match    *admissionregistrationv1.MatchPolicyType
		objSel   *metav1.LabelSelector
		side     *admissionregistrationv1.SideEffectClass
		timeout  *int32
		versions []string
		reinvoke *admissionregistrationv1.ReinvocationPolicyType
	}
	var hooks []hook
	if u.GetKind() == "MutatingWebhookConfiguration" {
		var c admissionregistrationv1.MutatingWebhookConfiguration
		if err := fromUnstructured(u, &c); err != nil {
			return nil, nil, err
		}
		for _, w := range c.Webhooks {
			hooks = append(hooks, hook{operatorsv1alpha1.MutatingAdmissionWebhook, w.Name, w.ClientConfig, w.Rules, w.FailurePolicy,
				w.MatchPolicy, w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, w.ReinvocationPolicy})
		}
	} else {
		var c admissionregistrationv1.ValidatingWebhookConfiguration
		if err := fromUnstructured(u, &c); err != nil {
			return nil, nil, err
		}
		for _, w := range c.Webhooks {
			hooks = append(hooks, hook{operatorsv1alpha1.ValidatingAdmissionWebhook, w.Name, w.ClientConfig, w.Rules, w.FailurePolicy,
				w.MatchPolicy, w.ObjectSelector, w.SideEffects, w.TimeoutSeconds, w.AdmissionReviewVersions, nil})
		}
	}
	var out []operatorsv1alpha1.WebhookDescription
	var services []string
	for _, h := range hooks {
		svc := h.client.Service
		if svc == nil || svc.Path == nil {
			return nil, nil, fmt.Errorf("%s %s: webhook %s is not served by a Service path", u.GetKind(), u.GetName(), h.name)
		}
		services = append(services, svc.Name)
		target := intstr.FromString("webhook")
		out = append(out, operatorsv1alpha1.WebhookDescription{
			GenerateName: h.name, Type: h.typ, ContainerPort: 443, TargetPort: &target,
			Rules: h.rules, FailurePolicy: h.failure, MatchPolicy: h.match, ObjectSelector: h.objSel,
			SideEffects: h.side, TimeoutSeconds: h.timeout, AdmissionReviewVersions: h.versions,
			ReinvocationPolicy: h.reinvoke, WebhookPath: svc.Path,
		})
	}
	return out, services, nil
}

// completeCSV fills in everything of the CSV that is derived.
func completeCSV(csv *operatorsv1alpha1.ClusterServiceVersion, o options, icon []byte,
	manager operatorsv1alpha1.StrategyDeploymentSpec, perms, clusterPerms []operatorsv1alpha1.StrategyDeploymentPermissions,
	webhooks []operatorsv1alpha1.WebhookDescription, crds []apiextensionsv1.CustomResourceDefinition, examples []map[string]any) error {
	csv.Name = o.Package + ".v" + o.Version
	csv.Spec.Version = version.OperatorVersion{Version: semver.MustParse(o.Version)}
	if csv.Annotations == nil {
		csv.Annotations = map[string]string{}
	}
	csv.Annotations["containerImage"] = o.Image
	ex, err := json.MarshalIndent(examples, "", "  ")
	if err != nil {
		return err
	}
	csv.Annotations["alm-examples"] = string(ex)
	csv.Spec.Icon = []operatorsv1alpha1.Icon{{Data: base64.StdEncoding.EncodeToString(icon), MediaType: "image/svg+xml"}}
	csv.Spec.RelatedImages = []operatorsv1alpha1.RelatedImage{{Name: "manager", Image: o.Image}, {Name: "domain-hook", Image: o.HookImage}}
	byKubeVirt, err := o.hookImagesByKubeVirt()
	if err != nil {
		return err
	}
	for _, h := range byKubeVirt {
		csv.Spec.RelatedImages = append(csv.Spec.RelatedImages, operatorsv1alpha1.RelatedImage{
			Name: "domain-hook-kubevirt-" + strings.ReplaceAll(h.minor, ".", "-"), Image: h.image})
	}
	csv.Spec.Replaces = o.Replaces
	if o.SkipRange != "" {
		csv.Annotations["olm.skipRange"] = o.SkipRange
	}
	csv.Spec.InstallStrategy = operatorsv1alpha1.NamedInstallStrategy{
		StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
		StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
			DeploymentSpecs: []operatorsv1alpha1.StrategyDeploymentSpec{manager}, Permissions: perms, ClusterPermissions: clusterPerms,
		},
	}
	csv.Spec.WebhookDefinitions = webhooks
	byKind := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for i := range crds {
		byKind[crds[i].Spec.Names.Kind] = &crds[i]
	}
	owned := csv.Spec.CustomResourceDefinitions.Owned
	if len(owned) != len(crds) {
		return fmt.Errorf("the CSV base owns %d CRDs, the input has %d", len(owned), len(crds))
	}
	for i := range owned {
		d := &owned[i]
		crd, ok := byKind[d.Kind]
		if !ok || crd.Name != d.Name {
			return fmt.Errorf("owned CRD %s (%s) is not in the input", d.Name, d.Kind)
		}
		schema := storageSchema(crd, d.Version)
		if schema == nil {
			return fmt.Errorf("CRD %s has no version %s", crd.Name, d.Version)
		}
		for j := range d.SpecDescriptors {
			sd := &d.SpecDescriptors[j]
			desc, err := fieldDescription(schema, "spec", sd.Path)
			if err != nil {
				return fmt.Errorf("%s specDescriptor: %w", d.Kind, err)
			}
			sd.Description = desc
		}
		for j := range d.StatusDescriptors {
			sd := &d.StatusDescriptors[j]
			desc, err := fieldDescription(schema, "status", sd.Path)
			if err != nil {
				return fmt.Errorf("%s statusDescriptor: %w", d.Kind, err)
			}
			sd.Description = desc
		}
	}
	return nil
}

func storageSchema(crd *apiextensionsv1.CustomResourceDefinition, ver string) *apiextensionsv1.JSONSchemaProps {
	for _, v := range crd.Spec.Versions {
		if v.Name == ver && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	return nil
}

// fieldDescription is the first paragraph of a field's schema description;
// the field must exist, so a descriptor cannot outlive its field.
func fieldDescription(schema *apiextensionsv1.JSONSchemaProps, root, path string) (string, error) {
	p, ok := schema.Properties[root]
	if !ok {
		return "", fmt.Errorf("the schema has no %s", root)
	}
	for _, seg := range strings.Split(path, ".") {
		next, ok := p.Properties[seg]
		if !ok {
			return "", fmt.Errorf("%s.%s is not in the CRD schema", root, path)
		}
		p = next
	}
	desc, _, _ := strings.Cut(p.Description, "\n\n")
	return strings.Join(strings.Fields(desc), " "), nil
}

// write replaces bundle/manifests and bundle/metadata and writes the
// Dockerfile, with the same labels as annotations.yaml.
func (b *bundle) write(o options) error {
	manifests := filepath.Join(o.OutDir, "manifests")
	metadata := filepath.Join(o.OutDir, "metadata")
	for _, dir := range []string{manifests, metadata} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	b.files[o.Package+".clusterserviceversion.yaml"] = typed(b.csv, operatorsv1alpha1.SchemeGroupVersion.String(),
		operatorsv1alpha1.ClusterServiceVersionKind)
	names := make([]string, 0, len(b.files))
	for name := range b.files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		data, err := marshal(b.files[name])
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(manifests, name), data, 0o644); err != nil { //nolint:gosec // manifests are public.
			return err
		}
	}
	labels := bundleLabels(o)
	var ann bytes.Buffer
	ann.WriteString("annotations:\n")
	var df bytes.Buffer
	df.WriteString("# The OLM bundle image of macvirt; generated by `make bundle`.\nFROM scratch\n\n")
	for _, l := range labels {
		fmt.Fprintf(&ann, "  %s: %s\n", l[0], l[1])
		fmt.Fprintf(&df, "LABEL %s=%s\n", l[0], l[1])
	}
	fmt.Fprintf(&df, "\nCOPY %s/manifests /manifests/\nCOPY %s/metadata /metadata/\n", o.OutDir, o.OutDir)
	if err := os.WriteFile(filepath.Join(metadata, "annotations.yaml"), ann.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(o.Dockerfile, df.Bytes(), 0o644)
}

// bundleLabels are the registry+v1 bundle annotations, in a stable order.
func bundleLabels(o options) [][2]string {
	return [][2]string{
		{"operators.operatorframework.io.bundle.mediatype.v1", "registry+v1"},
		{"operators.operatorframework.io.bundle.manifests.v1", "manifests/"},
		{"operators.operatorframework.io.bundle.metadata.v1", "metadata/"},
		{"operators.operatorframework.io.bundle.package.v1", o.Package},
		{"operators.operatorframework.io.bundle.channels.v1", o.Channels},
		{"operators.operatorframework.io.bundle.channel.default.v1", o.DefaultChannel},
		{"operators.operatorframework.io.metrics.builder", "macvirt-bundlegen"},
		{"operators.operatorframework.io.metrics.mediatype.v1", "metrics+v1"},
		{"operators.operatorframework.io.metrics.project_layout", "go.kubebuilder.io/v4"},
	}
}

// marshal writes an object as YAML without the empty fields typed objects
// carry (creationTimestamp: null, status: {}).
func marshal(obj any) ([]byte, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	prune(m)
	if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
		delete(m, "status")
	}
	return yaml.Marshal(m)
}

func prune(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if k == "creationTimestamp" && val == nil {
				delete(t, k)
				continue
			}
			prune(val)
		}
	case []any:
		for _, e := range t {
			prune(e)
		}
	}
}

// kubevirtMinorRE is a KubeVirt minor as the operator names its variable:
// digits without leading zeros, no "v".
var kubevirtMinorRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// hookImage is the domain-hook image of one KubeVirt minor.
type hookImage struct{ minor, image string }

// hookImagesByKubeVirt parses --hook-images-by-kubevirt, in minor order.
func (o options) hookImagesByKubeVirt() ([]hookImage, error) {
	var out []hookImage
	for _, f := range strings.FieldsFunc(o.HookImagesByKubeVirt, func(r rune) bool { return r == ',' || r == ' ' }) {
		minor, image, ok := strings.Cut(f, "=")
		if !ok || image == "" || !kubevirtMinorRE.MatchString(minor) {
			return nil, fmt.Errorf("--hook-images-by-kubevirt: %q is not <major>.<minor>=<image> (for example 1.8=registry/hook@sha256:<digest>)", f)
		}
		out = append(out, hookImage{minor, image})
	}
	slices.SortFunc(out, func(a, b hookImage) int {
		return semver.MustParse(a.minor + ".0").Compare(semver.MustParse(b.minor + ".0"))
	})
	return out, nil
}

// hookImageEnv is the manager's RELATED_IMAGE_* variables of the hook
// images (internal/domainhook/install.ChooseImage reads them).
func (o options) hookImageEnv() ([]corev1.EnvVar, error) {
	byKubeVirt, err := o.hookImagesByKubeVirt()
	if err != nil {
		return nil, err
	}
	env := []corev1.EnvVar{{Name: install.RelatedImageEnv, Value: o.HookImage}}
	for _, h := range byKubeVirt {
		env = append(env, corev1.EnvVar{Name: install.RelatedImageEnvFor(h.minor), Value: h.image})
	}
	return env, nil
}

// apiServiceDefinitions completes the CSV base's owned APIService
// definitions (names and descriptions) from the APIServices of the input:
// OLM creates each APIService, its Service and its certificate itself,
// served by dep at the container port the input's Service targets. Every
// APIService must have its definition and the other way round. It returns
// those Services, which the bundle does not ship.
func apiServiceDefinitions(base []operatorsv1alpha1.APIServiceDescription, apiServices, services []*unstructured.Unstructured,
	dep appsv1.Deployment) ([]operatorsv1alpha1.APIServiceDescription, map[string]bool, error) {
	owned := slices.Clone(base)
	found := make([]bool, len(owned))
	shipped := map[string]bool{}
	for _, u := range apiServices {
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		version, _, _ := unstructured.NestedString(u.Object, "spec", "version")
		svcName, _, _ := unstructured.NestedString(u.Object, "spec", "service", "name")
		i := slices.IndexFunc(owned, func(d operatorsv1alpha1.APIServiceDescription) bool {
			return d.Group == group && d.Version == version
		})
		if i < 0 {
			return nil, nil, fmt.Errorf("APIService %s has no apiservicedefinitions.owned entry in the CSV base (group %s, version %s)", u.GetName(), group, version)
		}
		svc := slices.IndexFunc(services, func(s *unstructured.Unstructured) bool { return s.GetName() == svcName })
		if svc < 0 {
			return nil, nil, fmt.Errorf("APIService %s names Service %s, which is not in the input", u.GetName(), svcName)
		}
		ports, _, _ := unstructured.NestedSlice(services[svc].Object, "spec", "ports")
		if len(ports) != 1 {
			return nil, nil, fmt.Errorf("the Service %s has %d ports, want one (OLM's has one)", svcName, len(ports))
		}
		target, _ := ports[0].(map[string]any)["targetPort"].(string)
		port, err := containerPort(dep, target)
		if err != nil {
			return nil, nil, fmt.Errorf("APIService %s: %w", u.GetName(), err)
		}
		owned[i].ContainerPort, found[i] = port, true
		shipped[svcName] = true
	}
	for i, d := range owned {
		if !found[i] {
			return nil, nil, fmt.Errorf("the CSV base owns APIService %s.%s, which is not in the input", d.Version, d.Group)
		}
	}
	return owned, shipped, nil
}

// containerPort is the number of the manager container's port name.
func containerPort(dep appsv1.Deployment, name string) (int32, error) {
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("the Deployment %s has no container port named %q", dep.Name, name)
}
