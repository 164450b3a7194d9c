package v1alpha1

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/smbios"
)

// The mutating webhook matches CREATE only (it draws the SMBIOS identity).
// The validating one matches CREATE and UPDATE: besides checking a new
// machine, it refuses anyone but the operator who sets or changes what
// binds a machine or speaks for it (OperatorOnlyChanges). It fails closed,
// so those fields cannot be written while it is down; the operator's own
// updates go through the webhook its own process serves. The CRD's CEL
// rules keep claimRef, smbios, className and classRevision immutable.
// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macmachine,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macmachines,verbs=create,versions=v1alpha1,name=mmacmachine-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macmachines,verbs=create;update,versions=v1alpha1,name=vmacmachine-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// machineWebhook gives machines a unique SMBIOS identity and validates them.
type machineWebhook struct {
	lookup *lookup
	// operator is the user name the operator's own requests arrive under.
	operator string
}

// byOperator reports whether the request is the operator's own.
func (w *machineWebhook) byOperator(ctx context.Context) (bool, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the admission request: %w", err)
	}
	return w.operator != "" && req.UserInfo.Username == w.operator, nil
}

// operatorOnly refuses, unless the request is the operator's own, a write
// that sets or changes what only the operator may (old is nil on create).
func (w *machineWebhook) operatorOnly(ctx context.Context, old, m *macvirtv1alpha1.MacMachine) error {
	if ok, err := w.byOperator(ctx); ok || err != nil {
		return err
	}
	return invalid("MacMachine", m.Name, OperatorOnlyChanges(old, m))
}

func (w *machineWebhook) Default(ctx context.Context, m *macvirtv1alpha1.MacMachine) error {
	product := ""
	class, err := w.lookup.class(ctx, m.Spec.ClassName)
	if err != nil {
		return err
	}
	if class != nil {
		product = class.Spec.EffectiveHardware().SMBIOS.ProductName
	}
	if err := DefaultMacMachine(m, product, w.lookup.newIdentity(ctx)); err != nil {
		return fmt.Errorf("generating the SMBIOS identity of MacMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

func (w *machineWebhook) ValidateCreate(ctx context.Context, m *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	if err := w.operatorOnly(ctx, nil, m); err != nil {
		return nil, err
	}
	class, err := w.lookup.class(ctx, m.Spec.ClassName)
	if err != nil {
		return nil, err
	}
	env := MachineEnv{Class: class}
	if env.ByOperator, err = w.byOperator(ctx); err != nil {
		return nil, err
	}
	if !env.ByOperator {
		ns := &corev1.Namespace{}
		ok, err := w.lookup.get(ctx, types.NamespacedName{Name: m.Namespace}, ns)
		if err != nil {
			return nil, err
		}
		if ok {
			env.Namespace = ns
		}
	}
	if m.Spec.SMBIOS != nil {
		if env.SMBIOSUsers, err = smbios.Users(ctx, w.lookup.cache, *m.Spec.SMBIOS,
			types.NamespacedName{Namespace: m.Namespace, Name: m.Name}); err != nil {
			return nil, err
		}
	}
	errs, warns := ValidateMacMachine(m, env)
	return warns, invalid("MacMachine", m.Name, errs)
}

// ValidateUpdate refuses changes only the operator may make.
func (w *machineWebhook) ValidateUpdate(ctx context.Context, old, m *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	return nil, w.operatorOnly(ctx, old, m)
}

func (w *machineWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	return nil, nil
}
