package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/render"
)

// classDataSourceField indexes MacClasses by the DataSources they reference.
const classDataSourceField = "macvirt.io/datasource"

// MacClassReconciler records a class's revision and checks what can be
// checked: that its DataSources and, for AppleSMC, its OSK Secret exist.
type MacClassReconciler struct {
	client.Client
	// APIReader reads the OSK Secret uncached (the operator watches no Secrets).
	APIReader      client.Reader
	ControllerName string
}

// +kubebuilder:rbac:groups=macvirt.io,resources=macclasses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datasources,verbs=get;list;watch

// Reconcile computes revision and Ready, and writes status if it changed.
func (r *MacClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	class := &macvirtv1alpha1.MacClass{}
	if err := r.Get(ctx, req.NamespacedName, class); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var missing []string
	for _, ref := range dataSourceRefs(class) {
		ds := &cdiv1.DataSource{}
		if err := r.Get(ctx, ref, ds); err != nil {
			if !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
			missing = append(missing, "DataSource "+ref.String())
		}
	}
	if smc := class.Spec.Hardware.SMC; smc.Mode == macvirtv1alpha1.SMCModeAppleSMC && smc.OSKSecretRef != nil {
		key := types.NamespacedName{Namespace: smc.OSKSecretRef.Namespace, Name: smc.OSKSecretRef.Name}
		if err := r.APIReader.Get(ctx, key, &corev1.Secret{}); err != nil {
			missing = append(missing, fmt.Sprintf("OSK Secret %s (%s)", key, reasonOf(err)))
		}
	}
	st := class.Status.DeepCopy()
	st.ObservedGeneration = class.Generation
	st.Revision = render.ClassRevision(class)
	var p *problem
	if len(missing) > 0 {
		p = &problem{macvirtv1alpha1.ReasonDataSourceMissing,
			"missing: " + strings.Join(missing, ", ") + "; machines of this class cannot be provisioned until they exist"}
	}
	setSummaryConditions(&st.Conditions, class.Generation, p, "all referenced sources exist")
	if equality.Semantic.DeepEqual(&class.Status, st) {
		return ctrl.Result{}, nil
	}
	before := class.DeepCopy()
	class.Status = *st
	return ctrl.Result{}, client.IgnoreNotFound(r.Status().Patch(ctx, class, client.MergeFrom(before)))
}

func reasonOf(err error) string {
	switch {
	case apierrors.IsNotFound(err):
		return "not found"
	case apierrors.IsForbidden(err):
		return "forbidden: the operator reads Secrets only in its own namespace unless granted more"
	}
	return err.Error()
}

// dataSourceRefs lists the DataSources a class clones from.
func dataSourceRefs(class *macvirtv1alpha1.MacClass) []types.NamespacedName {
	var out []types.NamespacedName
	for _, ref := range []*cdiv1.DataVolumeSourceRef{class.Spec.Image.SourceRef, class.Spec.Bootloader.SourceRef} {
		if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
			continue
		}
		ns := ""
		if ref.Namespace != nil {
			ns = *ref.Namespace
		}
		out = append(out, types.NamespacedName{Namespace: ns, Name: ref.Name})
	}
	return out
}

// SetupWithManager watches classes and the DataSources they reference.
func (r *MacClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := r.ControllerName
	if name == "" {
		name = "macclass"
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&macvirtv1alpha1.MacClass{}).
		Watches(&cdiv1.DataSource{}, handler.EnqueueRequestsFromMapFunc(r.dataSourceToClasses)).
		Named(name).
		Complete(r)
}

func (r *MacClassReconciler) dataSourceToClasses(ctx context.Context, o client.Object) []reconcile.Request {
	var list macvirtv1alpha1.MacClassList
	if err := r.List(ctx, &list, client.MatchingFields{classDataSourceField: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
	}
	return out
}
