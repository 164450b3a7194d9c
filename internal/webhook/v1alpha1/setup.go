package v1alpha1

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/smbios"
)

// Why each webhook fails the way it does when the operator is unavailable
// (the failurePolicy of its marker):
//
//   - Mutating webhooks Ignore. Every static default is also a default of
//     the CRD schema, so an object admitted while the operator is down gets
//     the same values; the computed ones are covered by the controllers
//     (an unset pool maxMachines means twice idle; a machine without an SMBIOS
//     identity gets a unique one from the machine controller).
//   - Validating webhooks Fail. They refuse what CEL cannot see (a claim
//     from a namespace its class does not allow, a pool of another class,
//     an incomplete image source, an identity already in use); admitting
//     that while the operator is down would let in objects that can never
//     work. The caller gets "failed calling webhook" and retries.
//
// What never depends on them: DELETE is in no rule, so namespaces, claims
// and machines can always be deleted. Status is a subresource no rule
// matches, and the operator writes only status to classes, pools and
// claims, so heartbeats and claim status go on while the webhooks are
// down. Machine updates (finalizer, binding, identity, agent token) do
// depend on the machine webhook, which refuses them from anyone but the
// operator; they wait for it as any refused write does, shown in status.

// Options configure the webhooks.
type Options struct {
	// EmulatorOverride is true when the operator runs with --emulator-path.
	EmulatorOverride bool
	// OperatorUser is the user name the operator's own requests arrive
	// under (see Identity): only it may write what binds a machine. When
	// empty, nobody may.
	OperatorUser string
	// ImagesNamespace is where refreshed images are imported (a class's
	// registry credentials are asked about there).
	ImagesNamespace string
}

// Setup registers the defaulting and validating webhooks of every kind
// with the manager's webhook server, and the cache index they look up
// SMBIOS identities by (unless the controllers registered it already).
func Setup(mgr ctrl.Manager, opts Options) error {
	l := &lookup{cache: mgr.GetClient(), api: mgr.GetAPIReader()}
	for _, err := range []error{
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacClass{}).
			WithDefaulter(&classWebhook{}).WithValidator(&classWebhook{env: ClassEnv{EmulatorOverride: opts.EmulatorOverride},
			reviews: mgr.GetClient(), imagesNamespace: opts.ImagesNamespace}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacPool{}).
			WithDefaulter(&poolWebhook{}).WithValidator(&poolWebhook{lookup: l}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacClaim{}).
			WithDefaulter(&claimWebhook{}).WithValidator(&claimWebhook{lookup: l, reviews: mgr.GetClient()}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacMachine{}).
			WithDefaulter(&machineWebhook{lookup: l}).WithValidator(&machineWebhook{lookup: l, operator: opts.OperatorUser}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacRunnerSet{}).
			WithValidator(&runnerSetWebhook{reviews: mgr.GetClient()}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacBuildkiteQueue{}).
			WithValidator(&buildkiteQueueWebhook{reviews: mgr.GetClient()}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &macvirtv1alpha1.MacImage{}).
			WithValidator(&imageWebhook{lookup: l, reviews: mgr.GetClient()}).Complete(),
	} {
		if err != nil {
			return fmt.Errorf("setting up webhooks: %w", err)
		}
	}
	return nil
}

// lookup reads what validation needs: from the cache, and from the API
// server when the cache does not have it yet (an object applied a moment
// before, as GitOps tools do).
type lookup struct {
	cache client.Reader
	api   client.Reader
}

// get fills obj and says whether it exists.
func (l *lookup) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	err := l.cache.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = l.api.Get(ctx, key, obj)
	}
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %T %s: %w", obj, key, err)
	}
	return true, nil
}

// class returns the named class, nil when it does not exist.
func (l *lookup) class(ctx context.Context, name string) (*macvirtv1alpha1.MacClass, error) {
	if name == "" {
		return nil, nil
	}
	c := &macvirtv1alpha1.MacClass{}
	ok, err := l.get(ctx, types.NamespacedName{Name: name}, c)
	if !ok {
		return nil, err
	}
	return c, nil
}

// invalid is the admission error of a list of field errors: a 422 Invalid
// status whose causes name each field, as kubectl prints them.
func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: macvirtv1alpha1.GroupVersion.Group, Kind: kind}, name, errs)
}

// newIdentity draws an SMBIOS identity unused by the machines the cache knows.
func (l *lookup) newIdentity(ctx context.Context) IdentityFunc {
	return func(product string) (macvirtv1alpha1.MachineSMBIOS, error) {
		return smbios.NewUnique(ctx, l.cache, product)
	}
}
