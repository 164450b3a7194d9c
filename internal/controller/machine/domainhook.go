package machine

import (
	"context"
	"fmt"
	"maps"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
	"github.com/macvirt/macvirt/internal/controller/base"
	"github.com/macvirt/macvirt/internal/domainhook/contract"
	"github.com/macvirt/macvirt/internal/render"
)

// domainHookRecheck is how often a machine held for the domain hook looks
// again: the hook's objects are written at the operator's start and retried
// with backoff, and nothing the machine watches announces it.
const domainHookRecheck = 5 * time.Second

// holdForDomainHook answers whether the machine's VM must wait before it is
// created or started: while the domain-hook transport's objects are not in
// place, macOS would start without its settings (the Plugin transports
// fail open where KubeVirt's hook sidecar failed closed). Stopping never
// waits for it.
func (r *Reconciler) holdForDomainHook(o *machineObservation) bool {
	err := o.hookAnnotationsStale
	if err == nil && r.DomainHook != nil {
		err = r.DomainHook()
	}
	if err == nil {
		return false
	}
	o.Blocked = &base.Problem{Reason: macvirtv1alpha1.ReasonDomainHookNotReady,
		Message: fmt.Sprintf("not starting the VirtualMachine until the macOS settings can reach it: %v", err)}
	o.BlockedRecheck = domainHookRecheck
	return true
}

// hookAnnotationsFor returns the VM template's annotations with those of
// the domain settings made right for the operator's transport, taken from
// the configuration the VM was rendered with (its macvirt.io/domain-hook
// annotation, so neither the class nor a Secret is read again), and
// whether they changed. A template without that annotation was not
// rendered by macvirt and is left alone.
func hookAnnotationsFor(have map[string]string, opts render.Options) (map[string]string, bool, error) {
	raw, ok := have[contract.Annotation]
	if !ok {
		return have, false, nil
	}
	cfg, err := contract.Parse(raw)
	if err != nil {
		return have, false, err
	}
	want, err := render.HookAnnotations(cfg, opts)
	if err != nil {
		return have, false, err
	}
	next := map[string]string{}
	for k, v := range have {
		if !contract.IsDomainHookAnnotation(k) {
			next[k] = v
		}
	}
	maps.Copy(next, want)
	return next, !maps.Equal(have, next), nil
}

// ensureDomainHookAnnotations answers: does the machine's VM carry its
// macOS settings for the transport the operator runs with? A VM rendered
// under another transport (or by an operator without the Plugin's
// annotations) is patched, guarded by its resourceVersion; KubeVirt uses
// the change from the VM's next start, and nothing is restarted for it.
// A refusal is said in an event, and the VM is not started meanwhile.
func (r *Reconciler) ensureDomainHookAnnotations(ctx context.Context, o *machineObservation) (bool, error) {
	if o.VM == nil || o.VM.Spec.Template == nil {
		return true, nil
	}
	next, changed, err := hookAnnotationsFor(o.VM.Spec.Template.ObjectMeta.Annotations, r.Render)
	if err != nil {
		// Not started so: it would start without its settings.
		o.hookAnnotationsStale = fmt.Errorf("VirtualMachine %s's macvirt.io/domain-hook annotation cannot be read: %w", o.VM.Name, err)
		return true, nil
	}
	if !changed {
		return true, nil
	}
	what := "the domain settings of the " + transportName(r.Render) + " transport"
	if err := r.patchVMTemplate(ctx, o, what, func(vm *kubevirtv1.VirtualMachine) {
		vm.Spec.Template.ObjectMeta.Annotations = next
	}); err != nil {
		// Until the template is right the VM is not started (a running one
		// is left alone): KubeVirt would start it with the old transport,
		// whose objects the operator removed, or refuse it.
		o.hookAnnotationsStale = fmt.Errorf("VirtualMachine %s's template is not yet written for the %s transport: %w",
			o.VM.Name, transportName(r.Render), err)
	}
	return true, nil
}

func transportName(opts render.Options) string {
	if opts.DomainHook == "" {
		return "sidecar"
	}
	return string(opts.DomainHook)
}
