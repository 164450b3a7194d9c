package install

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	macvirtscheme "github.com/macvirt/macvirt/internal/scheme"
	"github.com/macvirt/macvirt/test/infrastructure/cluster"
)

func mapper(t *testing.T, cfg *rest.Config) *client.Options {
	t.Helper()
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cluster.DynamicClientOptions(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// TestDomainHookTransportsAgainstAnAPIServer runs the transport choice and
// the objects of each transport against a real API server, with KubeVirt
// 1.9's Plugin CRD installed half-way, and the sidecar's admission policy
// acting on pods.
func TestDomainHookTransportsAgainstAnAPIServer(t *testing.T) {
	cluster.NeedsAPIServer(t)
	s, err := macvirtscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	env := cluster.New(s)
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(cluster.MissingBinariesHint(err))
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()

	// A KubeVirt before 1.9: no Plugin kind.
	opts := mapper(t, cfg)
	for flag, want := range map[contract.Transport]string{
		"": "sidecar", contract.TransportAuto: "sidecar", contract.TransportSidecar: "sidecar",
		contract.TransportPluginCEL:     "error: needs KubeVirt's Plugin kind",
		contract.TransportPluginSidecar: "error: needs KubeVirt's Plugin kind",
	} {
		got, err := Resolve(ctx, opts.Mapper, nil, flag, Options{})
		if err != nil {
			if !strings.HasPrefix(want, "error: ") || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
				t.Errorf("--domain-hook=%q without the Plugin kind: %v, want %s", flag, err, want)
			}
		} else if string(got) != want {
			t.Errorf("--domain-hook=%q without the Plugin kind resolves to %s, want %s", flag, got, want)
		}
	}

	// KubeVirt 1.9 installs the Plugin CRD.
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(cluster.RepoRoot(), "test", "crds", "kubevirt-plugins")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	opts = mapper(t, cfg)
	c, err := client.NewWithWatch(cfg, *opts)
	if err != nil {
		t.Fatal(err)
	}

	// With the Plugins gate off, virt-api refuses to create Plugins; a
	// policy stands in for it, with its message.
	gateOff := refusal(t, c, "kubevirt-plugins-gate", admissionregistrationv1.Create, gateOffMessage)
	var got contract.Transport
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err = Resolve(ctx, opts.Mapper, c, contract.TransportAuto, Options{}); err != nil || got == contract.TransportSidecar {
			break
		}
	}
	if err != nil || got != contract.TransportSidecar {
		t.Fatalf("auto with the Plugin kind but the gate off: %s, %v; want sidecar", got, err)
	}
	if _, err := Resolve(ctx, opts.Mapper, c, contract.TransportPluginCEL, Options{}); err == nil ||
		!strings.Contains(err.Error(), "needs KubeVirt's Plugins feature gate, which is off") {
		t.Errorf("plugin-cel with the gate off: %v", err)
	}
	if err := (&Objects{Client: c, Reader: c, Transport: contract.TransportPluginCEL, Log: testr.New(t)}).Ensure(ctx); err == nil ||
		!strings.Contains(err.Error(), "Plugins feature gate is off") {
		t.Errorf("Ensure with the gate off: %v", err)
	}
	gateOff()

	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err = Resolve(ctx, opts.Mapper, c, contract.TransportAuto, Options{}); err != nil || got == contract.TransportPluginCEL {
			break
		}
	}
	if err != nil || got != contract.TransportPluginCEL {
		t.Fatalf("auto with the Plugin kind and the gate on: %s, %v; want plugin-cel", got, err)
	}
	if got, err := Resolve(ctx, opts.Mapper, c, contract.TransportPluginSidecar, Options{}); err != nil || got != contract.TransportPluginSidecar {
		t.Fatalf("plugin-sidecar on a Kubernetes serving MutatingAdmissionPolicy v1: %s, %v", got, err)
	}
	image := "registry.example/macvirt-domain-hook@sha256:0123"
	// Updates are counted: the API server does not bump the resourceVersion
	// of an update that changes nothing, so only the count shows a rewrite.
	updates := 0
	counting := interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			return cl.Update(ctx, obj, opts...)
		},
	})
	objects := func(tr contract.Transport) *Objects {
		return &Objects{Client: counting, Reader: c, Transport: tr, Log: testr.New(t),
			Options: Options{HookImage: image, EmulatorPath: "/opt/qemu/bin/qemu-system-x86_64"}}
	}
	plugin := func() (*pluginv1alpha1.Plugin, error) {
		p := &pluginv1alpha1.Plugin{}
		return p, c.Get(ctx, client.ObjectKey{Name: Name}, p)
	}

	// plugin-cel: the Plugin, as KubeVirt's CRD stores it, and written once.
	if err := objects(contract.TransportPluginCEL).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := plugin()
	if err != nil {
		t.Fatal(err)
	}
	want := CELPlugin(Options{EmulatorPath: "/opt/qemu/bin/qemu-system-x86_64"})
	if len(p.Spec.DomainHooks) != len(want.Spec.DomainHooks) || p.Spec.Condition != want.Spec.Condition ||
		p.Spec.DomainHooks[0].CEL.Expression != want.Spec.DomainHooks[0].CEL.Expression {
		t.Errorf("stored Plugin %+v", p.Spec)
	}
	updates = 0
	if err := objects(contract.TransportPluginCEL).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if updates != 0 {
		t.Errorf("a second Ensure rewrote the unchanged Plugin (%d updates): the stored one differs from ours", updates)
	}
	// An edited Plugin is put back.
	p.Spec.DomainHooks = p.Spec.DomainHooks[:1]
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := objects(contract.TransportPluginCEL).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ = plugin(); len(p.Spec.DomainHooks) != len(want.Spec.DomainHooks) {
		t.Errorf("the edited Plugin was not put back: %d hooks", len(p.Spec.DomainHooks))
	}

	// plugin-sidecar: the policy, its binding, and the Plugin's one sidecar hook.
	if err := objects(contract.TransportPluginSidecar).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if p, _ = plugin(); len(p.Spec.DomainHooks) != 1 || p.Spec.DomainHooks[0].Sidecar == nil {
		t.Errorf("plugin-sidecar left the Plugin %+v", p.Spec)
	}
	pol := &admissionregistrationv1.MutatingAdmissionPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: InjectionPolicyName}, pol); err != nil {
		t.Fatal(err)
	}
	updates = 0
	if err := objects(contract.TransportPluginSidecar).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if updates != 0 {
		t.Errorf("a second Ensure rewrote the unchanged policy, binding or Plugin (%d updates): the API server's defaults differ from ours", updates)
	}

	// The policy adds the sidecar to a macvirt virt-launcher pod with the
	// plugin socket volume, and to no other pod (dry-run creates, as
	// KubeVirt's own e2e test probes its policy; the API server loads a new
	// policy in its own time).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "macs"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, labels map[string]string, socketVolume bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}}}}
		if socketVolume {
			p.Spec.Volumes = []corev1.Volume{{Name: SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		return p
	}
	launcher := map[string]string{"kubevirt.io": "virt-launcher", macvirtv1alpha1.LabelMachine: "sonoma-1"}
	sidecarOf := func(p *corev1.Pod) *corev1.Container {
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			t.Fatalf("dry-run create of %s: %v", p.Name, err)
		}
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == SidecarContainer {
				return &p.Spec.Containers[i]
			}
		}
		return nil
	}
	var injected *corev1.Container
	for deadline := time.Now().Add(60 * time.Second); injected == nil && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		injected = sidecarOf(pod("mac", launcher, true))
	}
	if injected == nil {
		t.Fatal("the policy added no sidecar to a macvirt virt-launcher pod within 60 s")
	}
	if injected.Image != image || strings.Join(injected.Command, " ") != HookBinary+" --plugin-socket "+SocketPath+" --emulator-path /opt/qemu/bin/qemu-system-x86_64" ||
		len(injected.VolumeMounts) != 1 || injected.VolumeMounts[0].SubPath != Name || injected.VolumeMounts[0].MountPath != SocketDir ||
		!ptr.Deref(injected.SecurityContext.RunAsNonRoot, false) || injected.Resources.Limits.Cpu().String() != "50m" {
		t.Errorf("injected sidecar %+v", injected)
	}
	for name, p := range map[string]*corev1.Pod{
		"another VM's launcher":      pod("other", map[string]string{"kubevirt.io": "virt-launcher"}, true),
		"a launcher without plugins": pod("noplugins", launcher, false),
		"a pod that is no launcher":  pod("plain", map[string]string{macvirtv1alpha1.LabelMachine: "sonoma-1"}, true),
	} {
		if sidecarOf(p) != nil {
			t.Errorf("the policy added the sidecar to %s", name)
		}
	}

	// A refused write comes back with the API server's words.
	frozen := refusal(t, c, "no-plugin-updates", admissionregistrationv1.Update, "plugins are frozen by the platform team")
	var refused error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if refused = objects(contract.TransportPluginCEL).Ensure(ctx); refused != nil {
			break
		}
		// Not loaded yet: the write went through; make the next one an update again.
		if err := objects(contract.TransportPluginSidecar).Ensure(ctx); err != nil {
			refused = err
			break
		}
	}
	if refused == nil || !strings.Contains(refused.Error(), "plugins are frozen by the platform team") || !strings.Contains(refused.Error(), "updating") {
		t.Errorf("a refused Plugin update: %v, want the policy's message", refused)
	}
	frozen()

	// sidecar: everything macvirt made goes; an object someone else made
	// under the name stays.
	var removed error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if removed = objects(contract.TransportSidecar).Ensure(ctx); removed == nil {
			break
		}
	}
	if removed != nil {
		t.Fatal(removed)
	}
	if _, err := plugin(); !apierrors.IsNotFound(err) {
		t.Errorf("the Plugin is still there: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: InjectionPolicyName}, pol); !apierrors.IsNotFound(err) {
		t.Errorf("the policy is still there: %v", err)
	}
	foreign := &pluginv1alpha1.Plugin{ObjectMeta: metav1.ObjectMeta{Name: Name},
		Spec: pluginv1alpha1.PluginSpec{DomainHooks: []pluginv1alpha1.DomainHook{{CEL: &pluginv1alpha1.CELDomainHook{Expression: "Domain{}"}}}}}
	if err := c.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	if err := objects(contract.TransportSidecar).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plugin(); err != nil {
		t.Errorf("a Plugin macvirt did not make was deleted: %v", err)
	}
	// ... and not overwritten either: the plugin transport says why it
	// cannot go on.
	if err := objects(contract.TransportPluginCEL).Ensure(ctx); err == nil || !strings.Contains(err.Error(), "macvirt did not make it") {
		t.Errorf("plugin-cel over a Plugin macvirt did not make: %v", err)
	}
	if p, _ := plugin(); len(p.Spec.DomainHooks) != 1 {
		t.Errorf("the foreign Plugin was overwritten: %+v", p.Spec)
	}
}

// refusal makes the API server refuse an operation on Plugins with message,
// and returns what lifts it.
func refusal(t *testing.T, c client.Client, name string, op admissionregistrationv1.OperationType, message string) func() {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{op},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"plugin.kubevirt.io"}, APIVersions: []string{"*"}, Resources: []string{"plugins"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: message}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, o := range []client.Object{binding, policy} {
			if err := c.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
}
