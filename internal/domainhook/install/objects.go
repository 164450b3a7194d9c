package install

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	pluginv1alpha1 "kubevirt.io/api/plugin/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/macvirt/macvirt/internal/domainhook/contract"
)

// The Plugin and, for the plugin-sidecar transport, the admission policy
// that adds the sidecar. Each grants power over every VM or pod of the
// cluster, so the operator may touch these names only (create cannot be
// limited to a name). Writing the admission policy is granted only with
// the plugin-sidecar transport, by the shipped ClusterRole
// domain-hook-sidecar-writer (config/rbac) an admin binds when choosing
// it; under the default transports the operator may only find and delete
// a policy an earlier plugin-sidecar operator made.
// +kubebuilder:rbac:groups=plugin.kubevirt.io,resources=plugins,verbs=create
// +kubebuilder:rbac:groups=plugin.kubevirt.io,resources=plugins,verbs=get;update;delete,resourceNames=macvirt-macos
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;delete,resourceNames=macvirt-domain-hook-sidecar

// domainHookReady says whether the transport's objects are in place.
var domainHookReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "macvirt_domain_hook_ready",
	Help: "1 when the objects the domain-hook transport needs (the KubeVirt Plugin, the sidecar's admission policy) are in place, 0 while writing them fails; labelled with the transport.",
}, []string{"transport"})

func init() { metrics.Registry.MustRegister(Collectors()...) }

// Collectors is every metric the domain hook's installation exports.
func Collectors() []prometheus.Collector { return []prometheus.Collector{domainHookReady} }

// Objects keeps the cluster-scoped objects of the domain-hook
// transport in place: the Plugin for plugin-cel; the Plugin, the
// MutatingAdmissionPolicy and its binding for plugin-sidecar; none for
// KubeVirt's hook sidecar, whose annotation is on every VM. Objects of
// another transport that macvirt made are deleted, so a Mac never gets its
// settings from two transports. It writes at start and again every Resync
// (so a deleted or edited Plugin comes back), retrying a refused write
// with backoff; the refusal is logged in the API server's words and
// macvirt_domain_hook_ready drops to 0 until the write succeeds.
type Objects struct {
	Client client.Client
	// Reader reads the objects past the manager's cache: the operator may
	// read these names only, so it cannot list and watch the kinds.
	Reader    client.Reader
	Transport contract.Transport
	Options   Options
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
func (d *Objects) Ready() error {
	if d.Transport == contract.TransportSidecar {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.written {
		return fmt.Errorf("the operator has not yet written the %s transport's objects (Plugin %s)", d.Transport, Name)
	}
	return d.last
}

func (d *Objects) record(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.written, d.last = true, err
}

// NeedLeaderElection says only the leader writes.
func (d *Objects) NeedLeaderElection() bool { return true }

// Start writes the objects until ctx ends.
func (d *Objects) Start(ctx context.Context) error {
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
func (d *Objects) Ensure(ctx context.Context) error {
	if d.Transport.IsPlugin() {
		on, err := pluginsGateOn(ctx, d.Client, transportPlugin(d.Transport, d.Options))
		if err != nil {
			return err
		}
		if !on {
			return fmt.Errorf("KubeVirt's Plugins feature gate is off, so virt-launcher ignores Plugin %s: "+
				"macOS VMs started now get none of their settings; turn the gate on again (docs/domain-hook.md)", Name)
		}
	}
	var want, drop []client.Object
	policy, binding := &admissionregistrationv1.MutatingAdmissionPolicy{}, InjectionPolicyBinding()
	policy.Name = InjectionPolicyName
	switch d.Transport {
	case contract.TransportPluginCEL:
		want = []client.Object{CELPlugin(d.Options)}
		drop = []client.Object{binding, policy}
	case contract.TransportPluginSidecar:
		p, err := InjectionPolicy(d.Options)
		if err != nil {
			return err
		}
		// The policy first: a Plugin without its sidecar fails every start.
		want = []client.Object{p, InjectionPolicyBinding(), SidecarPlugin()}
	case contract.TransportSidecar:
		plugin := &pluginv1alpha1.Plugin{}
		plugin.Name = Name
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
func (d *Objects) apply(ctx context.Context, want client.Object) error {
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
func (d *Objects) remove(ctx context.Context, obj client.Object) error {
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
