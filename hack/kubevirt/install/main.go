// Command install writes what KubeVirt's virt-operator would install in a
// cluster, for macvirt's test clusters, which run virt-api and
// virt-controller as plain processes instead of virt-operator's
// Deployments. It calls virt-operator's own install strategy
// (pkg/virt-operator/resource/generate/install) for the KubeVirt version
// pinned in ../go.mod, then issues the certificates and injects the CA
// bundles as virt-operator's reconciler does, so the webhook
// configurations and APIServices are KubeVirt's, unchanged but for their
// caBundle.
//
// Usage (the test harness runs it for every new test cluster, so each
// cluster has certificates of its own):
//
//	install -out DIR [-feature-gates Sidecar,...] [-default-architecture ARCH]
//
// It writes DIR/crds/*.yaml (every CustomResourceDefinition) and
// DIR/install.yaml (the namespace, the KubeVirt CR, service accounts,
// RBAC, Services, certificates, the CA ConfigMap, webhook configurations,
// ValidatingAdmissionPolicies and APIServices), and prints nothing.
//
// Left out, because no virt-operator, virt-handler DaemonSet or OpenShift
// runs in a test cluster: Deployments and DaemonSets (the harness starts
// the processes), virt-operator's own webhook and Service, SCCs, Routes,
// ServiceMonitors and PrometheusRules, the common instance types, and the
// feature-gated virt-launcher pod webhook and virt-template resources
// (their gates are off).
package main

import (
	"bytes"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/install"
	operatorutil "kubevirt.io/kubevirt/pkg/virt-operator/util"
)

// namespace is where virt-api and virt-controller look for their
// configuration unless a service account file names another: KubeVirt's
// default install namespace.
const namespace = "kubevirt"

// certDuration outlives any test run; each cluster gets new certificates.
var certDuration = &metav1.Duration{Duration: 7 * 24 * time.Hour}

func main() {
	out := flag.String("out", "", "directory to write crds/*.yaml and install.yaml into")
	gates := flag.String("feature-gates", "", "comma-separated KubeVirt feature gates for the KubeVirt CR")
	arch := flag.String("default-architecture", "", "the KubeVirt CR's default architecture (virt-operator's own, amd64 here, when empty)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: install -out DIR [-feature-gates Gate,...] [-default-architecture ARCH]")
		os.Exit(2)
	}
	if err := run(*out, *gates, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "install:", err)
		os.Exit(1)
	}
}

func run(out, gates, arch string) error {
	kv := kubeVirtCR(gates, arch)
	config := operatorutil.GetTargetConfigFromKVWithEnvVarManager(kv, images{})
	strategy, err := install.GenerateCurrentInstallStrategy(config, "", namespace)
	if err != nil {
		return err
	}

	crdDir := filepath.Join(out, "crds")
	if err := os.MkdirAll(crdDir, 0o755); err != nil {
		return err
	}
	// The KubeVirt CRD is the one virt-operator's own manifest installs;
	// the strategy holds what virt-operator installs after it.
	kvCRD, err := components.NewKubeVirtCrd()
	if err != nil {
		return err
	}
	for _, crd := range append(strategy.CRDs(), kvCRD) {
		crd.TypeMeta = typeMeta("apiextensions.k8s.io/v1", "CustomResourceDefinition")
		if err := writeYAML(filepath.Join(crdDir, crd.Name+".yaml"), crd); err != nil {
			return err
		}
	}

	bundle, secrets, err := certificates(strategy.CertificateSecrets())
	if err != nil {
		return err
	}

	const rbacV1, admissionV1 = "rbac.authorization.k8s.io/v1", "admissionregistration.k8s.io/v1"
	objs := appendAs(nil, "v1", "Namespace", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	objs = appendAs(objs, "kubevirt.io/v1", "KubeVirt", kv)
	objs = appendAs(objs, "v1", "ServiceAccount", strategy.ServiceAccounts()...)
	objs = appendAs(objs, rbacV1, "ClusterRole", strategy.ClusterRoles()...)
	objs = appendAs(objs, rbacV1, "ClusterRoleBinding", strategy.ClusterRoleBindings()...)
	objs = appendAs(objs, rbacV1, "Role", strategy.Roles()...)
	objs = appendAs(objs, rbacV1, "RoleBinding", strategy.RoleBindings()...)
	for _, o := range strategy.Services() {
		if o.Name == components.VirtOperatorServiceName {
			continue // virt-operator does not run
		}
		objs = appendAs(objs, "v1", "Service", o)
	}
	objs = appendAs(objs, "v1", "Secret", secrets...)
	seen := map[string]bool{}
	for _, o := range strategy.ConfigMaps() {
		// The strategy lists the CA ConfigMaps twice; virt-operator's
		// create-or-update makes that harmless there, a manifest must not.
		if seen[o.Namespace+"/"+o.Name] {
			continue
		}
		seen[o.Namespace+"/"+o.Name] = true
		if o.Name == components.KubeVirtCASecretName {
			o.Data = map[string]string{components.CABundleKey: string(bundle)}
		}
		objs = appendAs(objs, "v1", "ConfigMap", o)
	}
	for _, o := range strategy.ValidatingWebhookConfigurations() {
		if o.Name == components.KubeVirtOperatorValidatingWebhookName {
			continue // virt-operator does not run
		}
		for i := range o.Webhooks {
			o.Webhooks[i].ClientConfig.CABundle = bundle
		}
		objs = appendAs(objs, admissionV1, "ValidatingWebhookConfiguration", o)
	}
	for _, o := range strategy.MutatingWebhookConfigurations() {
		if o.Name == components.VirtLauncherPodMutatingWebhookName {
			continue // feature-gated; virt-operator adds it only under its gate
		}
		for i := range o.Webhooks {
			o.Webhooks[i].ClientConfig.CABundle = bundle
		}
		objs = appendAs(objs, admissionV1, "MutatingWebhookConfiguration", o)
	}
	objs = appendAs(objs, admissionV1, "ValidatingAdmissionPolicy", strategy.ValidatingAdmissionPolicies()...)
	objs = appendAs(objs, admissionV1, "ValidatingAdmissionPolicyBinding", strategy.ValidatingAdmissionPolicyBindings()...)
	for _, o := range strategy.APIServices() {
		o.Spec.CABundle = bundle
		objs = appendAs(objs, "apiregistration.k8s.io/v1", "APIService", o)
	}
	return writeYAML(filepath.Join(out, "install.yaml"), objs...)
}

// appendAs appends items to out, each stamped with apiVersion and kind
// (KubeVirt's typed objects leave their TypeMeta empty or partial).
func appendAs[T runtime.Object](out []runtime.Object, apiVersion, kind string, items ...T) []runtime.Object {
	for _, o := range items {
		o.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
		out = append(out, o)
	}
	return out
}

// kubeVirtCR is the KubeVirt CR the test cluster carries: virt-api and
// virt-controller read their configuration (feature gates first) from it.
// virt-template's components, which KubeVirt deploys by default under a
// Beta gate, are turned off: they are a server of their own that a test
// cluster does not run, and an APIService without its server breaks
// discovery for every client.
func kubeVirtCR(gates, arch string) *v1.KubeVirt {
	off := false
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: namespace}}
	kv.Spec.Configuration.VirtTemplateDeployment = &v1.VirtTemplateDeployment{Enabled: &off}
	// What virt-operator reports once it has deployed: virt-api and
	// virt-controller read the configuration only of a KubeVirt CR with a
	// phase (the harness writes this status after creating the CR).
	kv.Status.Phase = v1.KubeVirtPhaseDeployed
	kv.Status.ObservedKubeVirtVersion = kubeVirtVersion()
	kv.Status.TargetKubeVirtVersion = kubeVirtVersion()
	// virt-operator records the architecture VMs default to: the CR's, or
	// its own when the CR names none.
	if arch != "" {
		kv.Spec.Configuration.ArchitectureConfiguration = &v1.ArchConfiguration{DefaultArchitecture: arch}
	}
	operatorutil.SetDefaultArchitecture(kv)
	if gates != "" {
		kv.Spec.Configuration.DeveloperConfiguration = &v1.DeveloperConfiguration{
			FeatureGates: strings.Split(gates, ","),
		}
	}
	return kv
}

// certificates issues the KubeVirt CA and every certificate virt-operator
// issues with it, and returns the CA bundle webhooks and APIServices carry.
func certificates(secrets []*corev1.Secret) ([]byte, []*corev1.Secret, error) {
	var ca *corev1.Secret
	for _, s := range secrets {
		if s.Name == components.KubeVirtCASecretName {
			ca = s
		}
	}
	if ca == nil {
		return nil, nil, fmt.Errorf("the install strategy has no %s secret", components.KubeVirtCASecretName)
	}
	if err := components.PopulateSecretWithCertificate(ca, nil, certDuration); err != nil {
		return nil, nil, fmt.Errorf("issuing the KubeVirt CA: %w", err)
	}
	caCert, err := components.LoadCertificates(ca)
	if err != nil {
		return nil, nil, err
	}
	var issued []*corev1.Secret
	for _, s := range secrets {
		if s != ca {
			if err := populate(s, caCert); err != nil {
				return nil, nil, err
			}
		}
		issued = append(issued, s)
	}
	return ca.Data[corev1.TLSCertKey], issued, nil
}

func populate(s *corev1.Secret, caCert *tls.Certificate) error {
	// The export and backup CAs are CAs of their own, issued unsigned.
	if s.Name == components.KubeVirtExportCASecretName || s.Name == components.KubeVirtBackupCASecretName {
		caCert = nil
	}
	if err := components.PopulateSecretWithCertificate(s, caCert, certDuration); err != nil {
		return fmt.Errorf("issuing %s: %w", s.Name, err)
	}
	return nil
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func writeYAML(path string, objs ...runtime.Object) error {
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return os.WriteFile(path, buf.Bytes(), 0o600)
}

// images answers virt-operator's image environment as a virt-operator
// image of the pinned version would: images are only names in a test
// cluster (no container runtime runs them).
type images struct{}

func (images) Getenv(key string) string {
	version := kubeVirtVersion()
	switch key {
	case operatorutil.VirtOperatorImageEnvName:
		return "quay.io/kubevirt/virt-operator:" + version
	case operatorutil.KubeVirtVersionEnvName:
		return version
	}
	return ""
}

// kubeVirtVersion is the version of kubevirt.io/kubevirt this binary was
// built with (../go.mod pins it).
func kubeVirtVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "kubevirt.io/kubevirt" {
				return m.Version
			}
		}
	}
	return "devel"
}

func (images) Setenv(string, string) error { return nil }
func (images) Unsetenv(string) error       { return nil }
func (images) Environ() []string           { return nil }
