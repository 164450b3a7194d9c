package class

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/controller/index"
	"github.com/macvirt/macvirt/internal/render"
)

// +kubebuilder:rbac:groups=macvirt.io,resources=macclasses/status,verbs=patch
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datasources,verbs=list;watch
// +kubebuilder:rbac:groups=apps,namespace=macvirt-system,resources=controllerrevisions,verbs=get;list;create;delete

// Reconcile gathers the class into a scope, runs the ordered steps and
// writes the status once, computed from the scope.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, reterr error) {
	s := &classScope{Name: req.Name}
	class := &macvirtv1alpha1.MacClass{}
	switch err := r.Get(ctx, req.NamespacedName, class); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting MacClass %s: %w", req.Name, err)
	default:
		s.Class, s.Revision = class, render.ClassRevision(class)
		defer func() {
			if err := r.patchStatus(ctx, s); err != nil && reterr == nil {
				reterr = err
			}
		}()
	}
	return ctrl.Result{}, base.RunSteps(ctx, s,
		r.ensureImageImport,
		r.observeCloneStrategy,
		r.ensureSnapshot,
		r.checkSources,
		r.pruneSnapshots,
	)
}

// patchStatus writes the status computed from the scope, only if it changed.
func (r *Reconciler) patchStatus(ctx context.Context, s *classScope) error {
	computed := computeClassStatus(s)
	if equality.Semantic.DeepEqual(s.Class.Status, computed) {
		return nil
	}
	before := s.Class.DeepCopy()
	s.Class.Status = computed
	_, err := base.WriteStatus(ctx, r.Client, s.Class, before, false)
	return err
}

// SetupWithManager watches classes, the DataSources they reference, and
// machine deletions, which may leave a snapshot unneeded.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.ControllerName
	if name == "" {
		name = "macclass"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacClass{}).
		Watches(&cdiv1.DataSource{}, handler.EnqueueRequestsFromMapFunc(r.dataSourceToClasses)).
		Watches(&cdiv1.DataImportCron{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(),
			&macvirtv1alpha1.MacClass{}, handler.OnlyControllerOwner())).
		Watches(&cdiv1.StorageProfile{}, handler.EnqueueRequestsFromMapFunc(r.storageProfileToClasses)).
		Watches(&macvirtv1alpha1.MacMachine{}, handler.EnqueueRequestsFromMapFunc(machineToClass),
			builder.WithPredicates(onlyDeletes)).
		Named(name).
		Complete(r)
}

// onlyDeletes passes delete events only.
var onlyDeletes = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// machineToClass maps a machine to its class (deleted or not).
func machineToClass(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*macvirtv1alpha1.MacMachine)
	if !ok || m.Spec.ClassName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: m.Spec.ClassName}}}
}

// storageProfileToClasses enqueues every class: a profile's clone strategy
// may be any class's, through the default storage class. Profiles change
// seldom.
func (r *Reconciler) storageProfileToClasses(ctx context.Context, _ client.Object) []reconcile.Request {
	var list macvirtv1alpha1.MacClassList
	if err := r.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing classes for a StorageProfile")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	return out
}

func (r *Reconciler) dataSourceToClasses(ctx context.Context, o client.Object) []reconcile.Request {
	var list macvirtv1alpha1.MacClassList
	if err := r.List(ctx, &list, client.MatchingFields{index.ClassDataSource: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing classes of DataSource", "dataSource", client.ObjectKeyFromObject(o))
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items)+1)
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	// A refreshed image's DataSource: CDI labels it with its cron, whose
	// controller is the class.
	if cronName := o.GetLabels()[labelDataImportCron]; cronName != "" && o.GetNamespace() == r.ImagesNamespace {
		cron := &cdiv1.DataImportCron{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: cronName}, cron); err == nil {
			if owner := metav1.GetControllerOf(cron); owner != nil && owner.Kind == "MacClass" {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: owner.Name}})
			}
		}
	}
	return out
}
