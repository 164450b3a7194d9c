package v1alpha1

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/identity"
)

// Machines are matched on CREATE only: the operator updates machines
// (finalizer, binding, identity), and those updates must not depend on the
// webhook; the CRD's CEL rules keep claimRef, smbios, className and
// classRevision immutable.
// +kubebuilder:webhook:path=/mutate-macvirt-io-v1alpha1-macmachine,mutating=true,failurePolicy=ignore,sideEffects=None,groups=macvirt.io,resources=macmachines,verbs=create,versions=v1alpha1,name=mmacmachine-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-macvirt-io-v1alpha1-macmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=macvirt.io,resources=macmachines,verbs=create,versions=v1alpha1,name=vmacmachine-v1alpha1.macvirt.io,admissionReviewVersions=v1,timeoutSeconds=10

// machineWebhook gives machines a unique SMBIOS identity and validates them.
type machineWebhook struct {
	lookup *lookup
}

func (w *machineWebhook) Default(ctx context.Context, m *macvirtv1alpha1.MacMachine) error {
	product := ""
	class, err := w.lookup.class(ctx, m.Spec.ClassName)
	if err != nil {
		return err
	}
	if class != nil {
		product = class.Spec.Hardware.SMBIOS.ProductName
	}
	if err := DefaultMacMachine(m, product, w.lookup.newIdentity(ctx)); err != nil {
		return fmt.Errorf("generating the SMBIOS identity of MacMachine %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

func (w *machineWebhook) ValidateCreate(ctx context.Context, m *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	class, err := w.lookup.class(ctx, m.Spec.ClassName)
	if err != nil {
		return nil, err
	}
	env := MachineEnv{Class: class}
	if m.Spec.SMBIOS != nil {
		if env.SMBIOSUsers, err = identity.Users(ctx, w.lookup.cache, *m.Spec.SMBIOS,
			types.NamespacedName{Namespace: m.Namespace, Name: m.Name}); err != nil {
			return nil, err
		}
	}
	errs, warns := ValidateMacMachine(m, env)
	return warns, invalid("MacMachine", m.Name, errs)
}

// ValidateUpdate is not called (machines are matched on CREATE only).
func (w *machineWebhook) ValidateUpdate(context.Context, *macvirtv1alpha1.MacMachine, *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	return nil, nil
}

func (w *machineWebhook) ValidateDelete(context.Context, *macvirtv1alpha1.MacMachine) (admission.Warnings, error) {
	return nil, nil
}
