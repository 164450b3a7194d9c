package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/macvirt/macvirt/internal/hookplugin"
)

// The Plugin and, for the plugin-sidecar transport, the admission policy
// that adds the sidecar. Each grants power over every VM or pod of the
// cluster, so the operator may touch these names only (create cannot be
// limited to a name).
// +kubebuilder:rbac:groups=plugin.kubevirt.io,resources=plugins,verbs=create
// +kubebuilder:rbac:groups=plugin.kubevirt.io,resources=plugins,verbs=get;update;delete,resourceNames=macvirt-macos
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=create
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;update;delete,resourceNames=macvirt-domain-hook-sidecar

var (
	pluginKind = schema.GroupKind{Group: pluginv1alpha1.SchemeGroupVersion.Group, Kind: "Plugin"}
	mapKind    = schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}
)

// served says whether the API server serves a kind at a version.
func served(mapper meta.RESTMapper, gk schema.GroupKind, version string) (bool, error) {
	_, err := mapper.RESTMapping(gk, version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	}
	return false, fmt.Errorf("asking the API server whether it serves %s/%s: %w", gk, version, err)
}

// ResolveDomainHook turns the --domain-hook flag into the transport the
// cluster supports, or says why the one asked for cannot work here. The
// Plugin kind alone does not make the plugin transports work: KubeVirt 1.9
// always installs the CRD, but virt-handler hands Plugins to virt-launcher
// only while the Plugins feature gate is on. virt-api's admission of Plugins
// refuses a create while the gate is off, so a dry-run create of the Plugin
// asks it.
func ResolveDomainHook(ctx context.Context, mapper meta.RESTMapper, c client.Client, t hookplugin.Transport,
	opts hookplugin.Options) (hookplugin.Transport, error) {
	if t == "" {
		t = hookplugin.TransportAuto
	}
	if t == hookplugin.TransportSidecar {
		return t, nil
	}
	plugins, err := served(mapper, pluginKind, pluginv1alpha1.SchemeGroupVersion.Version)
	if err != nil {
		return "", err
	}
	if t.Resolve(plugins).IsPlugin() && !plugins {
		return "", fmt.Errorf("--domain-hook=%s needs KubeVirt's Plugin kind (plugin.kubevirt.io/v1alpha1, KubeVirt 1.9 or later), "+
			"which this cluster does not serve; upgrade KubeVirt, or use --domain-hook=sidecar (or auto)", t)
	}
	gate := plugins
	if plugins {
		if gate, err = pluginsGateOn(ctx, c, transportPlugin(t.Resolve(true), opts)); err != nil {
			return "", err
		}
	}
	resolved := t.Resolve(gate)
	if resolved.IsPlugin() && !gate {
		return "", fmt.Errorf("--domain-hook=%s needs KubeVirt's Plugins feature gate, which is off: "+
			"turn it on (docs/domain-hook.md), or use --domain-hook=sidecar (or auto)", t)
	}
	if resolved == hookplugin.TransportPluginSidecar {
		policies, err := served(mapper, mapKind, admissionregistrationv1.SchemeGroupVersion.Version)
		if err != nil {
			return "", err
		}
		if !policies {
			return "", errors.New("--domain-hook=plugin-sidecar adds the hook sidecar with a MutatingAdmissionPolicy " +
				"(admissionregistration.k8s.io/v1, Kubernetes 1.36 or later), which this cluster does not serve; use --domain-hook=plugin-cel")
		}
	}
	return resolved, nil
}

// gateOffMessage is what virt-api's Plugin admission answers a create
// with while the gate is off (pkg/virt-api/webhooks/validating-webhook/
// admitters/plugin-admitter.go in KubeVirt 1.9).
const gateOffMessage = "Plugins feature gate is not enabled"

// transportPlugin is the Plugin a plugin transport writes.
func transportPlugin(t hookplugin.Transport, opts hookplugin.Options) *pluginv1alpha1.Plugin {
	if t == hookplugin.TransportPluginSidecar {
		return hookplugin.SidecarPlugin()
	}
	return hookplugin.CELPlugin(opts)
}

// pluginsGateOn asks virt-api, with a dry-run create of the transport's
// Plugin, whether KubeVirt's Plugins feature gate is on. The server runs
// admission before it checks whether the name exists, so an existing
// Plugin (AlreadyExists) means the gate is on.
func pluginsGateOn(ctx context.Context, c client.Client, plugin *pluginv1alpha1.Plugin) (bool, error) {
	err := c.Create(ctx, plugin, client.DryRunAll)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return true, nil
	case strings.Contains(err.Error(), gateOffMessage):
		return false, nil
	}
	return false, fmt.Errorf("asking virt-api whether KubeVirt's Plugins feature gate is on (a dry-run create of Plugin %s): %w",
		hookplugin.Name, err)
}

var domainHookReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_domain_hook_ready",
	Help: "1 when the objects the domain-hook transport needs (the KubeVirt Plugin, the sidecar's admission policy) are in place, 0 while writing them fails; labelled with the transport.",
}, []string{"transport"})

func init() { metrics.Registry.MustRegister(domainHookReady) }

// DomainHookObjects keeps the cluster-scoped objects of the domain-hook
// transport in place: the Plugin for plugin-cel; the Plugin, the
// MutatingAdmissionPolicy and its binding for plugin-sidecar; none for
// KubeVirt's hook sidecar, whose annotation is on every VM. Objects of
// another transport that macvirt made are deleted, so a Mac never gets its
// settings from two transports. It writes at start and again every Resync
// (so a deleted or edited Plugin comes back), retrying a refused write
// with backoff; the refusal is logged in the API server's words and
// macvirt_domain_hook_ready drops to 0 until the write succeeds.
type DomainHookObjects struct {
	Client client.Client
	// Reader reads the objects past the manager's cache: the operator may
	// read these names only, so it cannot list and watch the kinds.
	Reader    client.Reader
	Transport hookplugin.Transport
	Options   hookplugin.Options
	Log       logr.Logger
	// Resync is how often the objects are checked and written again (a
	// minute when 0): a Plugin deleted or a gate turned off shows in Ready
	// within it.
	Resync time.Duration

	mu      sync.Mutex
	written bool
	last    error
}

// Ready says whether the transport's objects are in place: nil once the
// last write succeeded, the reason otherwise. The machine controller
// creates and starts no VM meanwhile. KubeVirt's hook sidecar needs no
// object and is always ready.
func (d *DomainHookObjects) Ready() error {
	if d.Transport == hookplugin.TransportSidecar {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.written {
		return fmt.Errorf("the operator has not yet written the %s transport's objects (Plugin %s)", d.Transport, hookplugin.Name)
	}
	return d.last
}

func (d *DomainHookObjects) record(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.written, d.last = true, err
}

// NeedLeaderElection says only the leader writes.
func (d *DomainHookObjects) NeedLeaderElection() bool { return true }

// Start writes the objects until ctx ends.
func (d *DomainHookObjects) Start(ctx context.Context) error {
	resync := d.Resync
	if resync <= 0 {
		resync = time.Minute
	}
	backoff := time.Second
	for {
		wait := resync
		err := d.Ensure(ctx)
		d.record(err)
		if err != nil {
			domainHookReady.WithLabelValues(string(d.Transport)).Set(0)
			d.Log.Error(err, "Writing the domain-hook objects failed; macOS VMs started meanwhile may lack their settings", "transport", d.Transport, "retryIn", backoff)
			wait = backoff
			backoff = min(backoff*2, 5*time.Minute)
		} else {
			domainHookReady.WithLabelValues(string(d.Transport)).Set(1)
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Ensure writes what the transport needs and deletes what it does not.
func (d *DomainHookObjects) Ensure(ctx context.Context) error {
	if d.Transport.IsPlugin() {
		on, err := pluginsGateOn(ctx, d.Client, transportPlugin(d.Transport, d.Options))
		if err != nil {
			return err
		}
		if !on {
			return fmt.Errorf("KubeVirt's Plugins feature gate is off, so virt-launcher ignores Plugin %s: "+
				"macOS VMs started now get none of their settings; turn the gate on again (docs/domain-hook.md)", hookplugin.Name)
		}
	}
	var want, drop []client.Object
	policy, binding := &admissionregistrationv1.MutatingAdmissionPolicy{}, hookplugin.InjectionPolicyBinding()
	policy.Name = hookplugin.InjectionPolicyName
	switch d.Transport {
	case hookplugin.TransportPluginCEL:
		want = []client.Object{hookplugin.CELPlugin(d.Options)}
		drop = []client.Object{binding, policy}
	case hookplugin.TransportPluginSidecar:
		p, err := hookplugin.InjectionPolicy(d.Options)
		if err != nil {
			return err
		}
		// The policy first: a Plugin without its sidecar fails every start.
		want = []client.Object{p, hookplugin.InjectionPolicyBinding(), hookplugin.SidecarPlugin()}
	case hookplugin.TransportSidecar:
		plugin := &pluginv1alpha1.Plugin{}
		plugin.Name = hookplugin.Name
		drop = []client.Object{plugin, binding, policy}
	default:
		return fmt.Errorf("domain-hook transport %q is not resolved", d.Transport)
	}
	var errs []error
	for _, obj := range want {
		errs = append(errs, d.apply(ctx, obj))
	}
	for _, obj := range drop {
		errs = append(errs, d.remove(ctx, obj))
	}
	return errors.Join(errs...)
}

// apply creates obj, or updates the one there when its labels or spec
// differ.
func (d *DomainHookObjects) apply(ctx context.Context, want client.Object) error {
	kind := fmt.Sprintf("%T %s", want, want.GetName())
	have, ok := want.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%s: not a client object", kind)
	}
	err := d.Reader.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := d.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating %s: %w", kind, err)
		}
		d.Log.Info("Created the domain-hook object", "object", kind, "transport", d.Transport)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", kind, err)
	}
	if !madeByMacvirt(have) {
		return fmt.Errorf("%s exists and macvirt did not make it (no label %s=macvirt): "+
			"delete it, or run the operator with another --domain-hook", kind, managedBy)
	}
	if sameSpec(have, want) && equality.Semantic.DeepEqual(have.GetLabels(), want.GetLabels()) {
		return nil
	}
	want.SetResourceVersion(have.GetResourceVersion())
	if err := d.Client.Update(ctx, want); err != nil {
		return fmt.Errorf("updating %s: %w", kind, err)
	}
	d.Log.Info("Updated the domain-hook object", "object", kind, "transport", d.Transport)
	return nil
}

// managedBy is the label that marks what macvirt made.
const managedBy = "app.kubernetes.io/managed-by"

func madeByMacvirt(obj client.Object) bool { return obj.GetLabels()[managedBy] == "macvirt" }

// sameSpec compares the specs of two objects of the same kind.
func sameSpec(a, b client.Object) bool {
	switch a := a.(type) {
	case *pluginv1alpha1.Plugin:
		return equality.Semantic.DeepEqual(a.Spec, b.(*pluginv1alpha1.Plugin).Spec)
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		return equality.Semantic.DeepEqual(a.Spec, b.(*admissionregistrationv1.MutatingAdmissionPolicy).Spec)
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		return equality.Semantic.DeepEqual(a.Spec, b.(*admissionregistrationv1.MutatingAdmissionPolicyBinding).Spec)
	}
	return false
}

// remove deletes an object of another transport if macvirt made it; one
// someone else made under the name is left, and said so.
func (d *DomainHookObjects) remove(ctx context.Context, obj client.Object) error {
	kind := fmt.Sprintf("%T %s", obj, obj.GetName())
	err := d.Reader.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", kind, err)
	}
	if !madeByMacvirt(obj) {
		d.Log.Info("Leaving an object macvirt did not make, though the transport does not use it", "object", kind, "transport", d.Transport)
		return nil
	}
	// Only the object just read: one made anew under the name since is not
	// deleted.
	if err := d.Client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s of another transport: %w", kind, err)
	}
	d.Log.Info("Deleted the domain-hook object of another transport", "object", kind, "transport", d.Transport)
	return nil
}
