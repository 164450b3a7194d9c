package machine

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/classhistory"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/render"
)

// ExposureReconciler keeps each machine's NetworkPolicy in step with its
// binding: its claim's namespace let in once the machine is bound, nothing
// once it is released. It is the one writer of those changes, apart from
// the machine's reconcile, whose steps (disks, the VM, a graceful stop) a
// binding need not wait for: a claim is Ready only once its namespace is
// let in (the claim controller reads the policy), so this write is on the
// path to Ready. It has no status: what it could not write, a conflict or a
// refusal, is retried with backoff and logged; a policy of the machine's
// name the machine does not control is the machine reconcile's to report.
type ExposureReconciler struct {
	client.Client
	// Classes finds the class the machine renders from, as the machine's
	// reconcile does.
	Classes classhistory.Resolver
	// MaxConcurrentReconciles is how many machines' policies are written
	// at once: as many as claims are bound at once, since each binding waits
	// for its machine's policy.
	MaxConcurrentReconciles int
	// Tunnel is the operator's pods, which bound machines let in for the
	// tunnel through the API server; nil when it serves none.
	Tunnel *networkingv1.NetworkPolicyPeer
	// ControllerName overrides the controller's name, so tests can run
	// several managers in one process.
	ControllerName string
}

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;update

// Reconcile brings the machine's NetworkPolicy to what its binding allows.
func (r *ExposureReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &macvirtv1alpha1.MacMachine{}
	if err := r.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	have := &networkingv1.NetworkPolicy{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: render.NetworkPolicyName(m)}, have); err != nil {
		// Not made yet: the machine's reconcile makes it, as its binding
		// allows then, and its creation brings us back.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(have, m) {
		return ctrl.Result{}, nil
	}
	res, err := r.Classes.Resolve(ctx, m)
	if err != nil || res.Class == nil {
		return ctrl.Result{}, err
	}
	ex, err := exposureOf(ctx, r.Client, res.Class, m, r.Tunnel)
	if err != nil {
		return ctrl.Result{}, err
	}
	want := render.NetworkPolicy(res.Class, m, ex)
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
		return ctrl.Result{}, nil
	}
	have.Spec = want.Spec
	if err := r.Update(ctx, have); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: base.ConflictRetry}, nil
		}
		return ctrl.Result{}, fmt.Errorf("updating NetworkPolicy %s/%s: %w", have.Namespace, have.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("updated the machine's NetworkPolicy", "ingressFrom", ex.ClaimNamespace, "external", ex.External)
	return ctrl.Result{}, nil
}

// SetupWithManager watches what a machine's exposure follows: its spec
// (claimRef), its NetworkPolicy (an edit by hand is undone), its claim's
// spec (the access type) and deletion, and its class (ports and peers).
// Machines' status changes (heartbeats) wake nothing.
func (r *ExposureReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Classes.Classes == nil {
		r.Classes.Classes = r.Client
	}
	name := r.ControllerName
	if name == "" {
		name = "macmachine-exposure"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacMachine{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&macvirtv1alpha1.MacClaim{}, handler.EnqueueRequestsFromMapFunc(r.claimToMachines),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&macvirtv1alpha1.MacClass{}, handler.EnqueueRequestsFromMapFunc(r.classToMachines),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Named(name).
		Complete(r)
}

func (r *ExposureReconciler) claimToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	return machinesIndexed(ctx, r.Client, index.MachineClaimUID, string(o.GetUID()))
}

func (r *ExposureReconciler) classToMachines(ctx context.Context, o client.Object) []reconcile.Request {
	return machinesIndexed(ctx, r.Client, index.MachineClass, o.GetName())
}

// machinesIndexed lists the machines whose index field holds value.
func machinesIndexed(ctx context.Context, c client.Reader, field, value string) []reconcile.Request {
	var list macvirtv1alpha1.MacMachineList
	if err := c.List(ctx, &list, client.MatchingFields{field: value}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing machines; they wait for their next event", "field", field, "value", value)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
